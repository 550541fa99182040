// The stores (a directory, a Redis server, PyTorch's TCPStore: tcpstore.cc) and the store flags: --store,
// --run-id. StoreSpec.kind is "file", "redis" or "tcp" (tcp://HOST:PORT, a TCPStore someone else serves).
#include "src/store/store.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstdlib>
#include <cstring>

#include <fmt/format.h>

#include "src/flags.h"
#include "src/store/deadline.h"
#include "src/store/redis.h"
#include "src/store/tcpstore.h"

namespace ddplab::dist {

using std::chrono::milliseconds;

namespace {

constexpr const char* kExpirySeconds = "604800";  // Redis keys expire after a week: a shared server stays clean

StoreSpec with_env_password(StoreSpec s) {
  if (s.kind == "redis" && s.password.empty()) {
    if (const char* p = std::getenv("DDPLAB_REDIS_PASSWORD"); p && *p) s.password = p;
  }
  return s;
}

void check_directory(const std::string& path) {
  struct stat st {};
  if (stat(path.c_str(), &st) != 0 || !S_ISDIR(st.st_mode)) {
    throw SetupError(fmt::format("store directory '{}' does not exist", path));
  }
  if (access(path.c_str(), W_OK) != 0) throw SetupError(fmt::format("store directory '{}' is not writable", path));
}

class FileStore : public Store {
 public:
  explicit FileStore(std::string root) : root_(std::move(root)) { describe = "the file store " + root_; }
  ~FileStore() override {
    if (alive_fd_ >= 0) close(alive_fd_);
  }

  void put(const std::string& key, const std::string& value) override {
    static std::atomic<uint64_t> counter{0};
    const std::string path = root_ + "/" + key;
    const std::string tmp = fmt::format("{}.tmp.{}.{}", path, getpid(), counter++);
    const int fd = open(tmp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
    if (fd < 0) throw SetupError(fmt::format("cannot write {}: {}", tmp, std::strerror(errno)));
    size_t done = 0;
    while (done < value.size()) {
      const ssize_t n = write(fd, value.data() + done, value.size() - done);
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) {
        const int err = errno;
        close(fd);
        unlink(tmp.c_str());
        throw SetupError(fmt::format("cannot write {}: {}", tmp, std::strerror(err)));
      }
      done += static_cast<size_t>(n);
    }
    close(fd);
    if (rename(tmp.c_str(), path.c_str()) != 0) {  // atomic: readers see all of the value or none
      const int err = errno;
      unlink(tmp.c_str());
      throw SetupError(fmt::format("cannot write {}: {}", path, std::strerror(err)));
    }
  }

  std::optional<std::string> fetch(const std::string& key) override {
    const std::string path = root_ + "/" + key;
    const int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
      if (errno == ENOENT || errno == ENOTDIR) return std::nullopt;
      throw SetupError(fmt::format("cannot read {}: {}", path, std::strerror(errno)));
    }
    struct stat st {};
    fstat(fd, &st);
    if (!S_ISREG(st.st_mode) || static_cast<uint64_t>(st.st_size) > kMaxValueBytes) {
      close(fd);
      throw SetupError(
          fmt::format("{} is not a store value ({} bytes; the limit is {}): the store must hold only "
                      "this run's keys",
                      path, st.st_size, kMaxValueBytes));
    }
    std::string value(static_cast<size_t>(st.st_size), '\0');
    size_t done = 0;
    while (done < value.size()) {
      const ssize_t n = read(fd, value.data() + done, value.size() - done);
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) break;
      done += static_cast<size_t>(n);
    }
    close(fd);
    value.resize(done);
    return value;
  }

  bool exists(const std::string& key) override { return access((root_ + "/" + key).c_str(), F_OK) == 0; }

  void enter(const std::string& scope) override {
    // One level at a time, never recreating the store directory itself (a launcher may be removing it).
    const std::string path = root_ + "/" + scope;
    if (mkdir(path.c_str(), 0755) != 0 && errno != EEXIST) {
      throw SetupError(fmt::format("cannot create {}: {}", path, std::strerror(errno)));
    }
  }

  // An open file description's lock (F_OFD_SETLK): released by the kernel when the process ends, however
  // it ends; another process (or thread with its own open) sees it with F_OFD_GETLK.
  void hold_alive(const std::string& scope, int rank) override {
    if (alive_fd_ >= 0) close(alive_fd_);
    alive_fd_ = open(alive_path(scope, rank).c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
    if (alive_fd_ < 0) return;  // liveness unknown: peers wait for this rank's report instead
    struct flock fl {};
    fl.l_type = F_WRLCK;
    fl.l_whence = SEEK_SET;
    if (fcntl(alive_fd_, F_OFD_SETLK, &fl) != 0) {
      close(alive_fd_);
      alive_fd_ = -1;
    }
  }

  std::vector<Life> lives(const std::string& scope, int world_size) override {
    std::vector<Life> out(static_cast<size_t>(world_size), Life::unknown);
    for (int r = 0; r < world_size; ++r) {
      const int fd = open(alive_path(scope, r).c_str(), O_RDONLY | O_CLOEXEC);
      if (fd < 0) continue;
      struct flock fl {};
      fl.l_type = F_RDLCK;
      fl.l_whence = SEEK_SET;
      if (fcntl(fd, F_OFD_GETLK, &fl) == 0)
        out[static_cast<size_t>(r)] = fl.l_type == F_UNLCK ? Life::gone : Life::alive;
      close(fd);
    }
    return out;
  }

 private:
  std::string alive_path(const std::string& scope, int rank) const {
    return fmt::format("{}/{}/alive_{}", root_, scope, rank);
  }
  std::string root_;
  int alive_fd_ = -1;
};

class RedisStore : public Store {
 public:
  explicit RedisStore(const StoreSpec& spec) : spec_(spec), main_(redis_open(spec)) { describe = redis_where(spec); }

  void put(const std::string& key, const std::string& value) override {
    const Reply r = cmd(*main_, {"SET", key, value, "EX", kExpirySeconds});
    if (r.type != '+') throw SetupError(fmt::format("{}: SET {} failed: {}", describe, key, one_line(r.str)));
  }
  std::optional<std::string> fetch(const std::string& key) override {
    const Reply r = cmd(*main_, {"GET", key});
    if (r.type == '$' && r.nil) return std::nullopt;
    if (r.type != '$') throw SetupError(fmt::format("{}: GET {} failed: {}", describe, key, one_line(r.str)));
    return r.str;
  }
  bool exists(const std::string& key) override {
    const Reply r = cmd(*main_, {"EXISTS", key});
    if (r.type != ':') throw SetupError(fmt::format("{}: EXISTS {} failed: {}", describe, key, one_line(r.str)));
    return r.integer > 0;
  }

  // A connection of its own, named after the rank: Redis drops it when the process ends, and CLIENT LIST
  // shows who is still there. The name is published (once, at join) so that peers know to look for it.
  void hold_alive(const std::string& scope, int rank) override {
    try {
      if (!life_) life_ = redis_open(spec_);
      const std::string name = client_name(scope, rank);
      if (cmd(*life_, {"CLIENT", "SETNAME", name}).type == '+') put(scope + "/" + fmt::format("alive_{}", rank), name);
    } catch (const SetupError&) {  // liveness unknown: peers wait for this rank's report instead
    }
  }
  std::vector<Life> lives(const std::string& scope, int world_size) override {
    std::vector<Life> out(static_cast<size_t>(world_size), Life::unknown);
    const Reply list = cmd(*main_, {"CLIENT", "LIST"}, 64u << 20);
    if (list.type != '$') return out;  // CLIENT forbidden here (ACL, renamed command): unknown
    for (int r = 0; r < world_size; ++r) {
      const std::string name = client_name(scope, r);
      if (!exists(scope + "/" + fmt::format("alive_{}", r))) continue;  // it never registered: unknown
      out[static_cast<size_t>(r)] =
          list.str.find(" name=" + name + " ") != std::string::npos ? Life::alive : Life::gone;
    }
    return out;
  }

 private:
  static std::string client_name(const std::string& scope, int rank) {
    return fmt::format("ddplab/{}/{}", scope, rank);
  }
  Reply cmd(RedisConn& c, const std::vector<std::string>& args, size_t max_bulk = kMaxValueBytes) {
    try {
      return c.command(args, kStoreIoMs, max_bulk);
    } catch (const RedisIoError& e) {
      throw SetupError(fmt::format("{}: {} failed: {}", describe, args[0], e.what()));
    }
  }

  StoreSpec spec_;
  std::unique_ptr<RedisConn> main_, life_;
};

}  // namespace

StoreSpec parse_store(const std::string& text) {
  StoreSpec s;
  if (text.rfind("tcp://", 0) == 0) {  // HOST:PORT or [IPv6]:PORT; the port is required (no default)
    s.kind = "tcp";
    const std::string rest = text.substr(6);
    const size_t colon = rest.rfind(':');
    std::string port = colon == std::string::npos ? "" : rest.substr(colon + 1);
    s.host = colon == std::string::npos ? "" : rest.substr(0, colon);
    if (s.host.size() > 2 && s.host.front() == '[' && s.host.back() == ']')
      s.host = s.host.substr(1, s.host.size() - 2);
    int64_t p = 0;
    try {
      p = parse_int("--store port", port);
    } catch (const UsageError&) {
      p = 0;
    }
    if (s.host.empty() || s.host.find_first_of("[]@/") != std::string::npos || p < 1 || p > 65535) {
      throw UsageError(fmt::format("--store must be tcp://HOST:PORT with a port in [1, 65535] (got '{}')", text));
    }
    s.port = static_cast<int>(p);
    return s;
  }
  if (text.rfind("file:", 0) == 0) {
    s.kind = "file";
    s.path = text.substr(5);
    if (s.path.empty()) throw UsageError("--store file:DIR needs a directory");
    return s;
  }
  if (text.rfind("redis://", 0) == 0) {
    s.kind = "redis";
    std::string rest = text.substr(8);
    std::string shown = text;  // never echo a password
    if (const size_t at = rest.rfind('@'); at != std::string::npos) {
      const std::string userinfo = rest.substr(0, at);
      rest = rest.substr(at + 1);
      const size_t colon = userinfo.find(':');
      shown = "redis://" + (colon == std::string::npos ? std::string("***") : userinfo.substr(0, colon) + ":***") +
              "@" + rest;
      if (colon == std::string::npos || colon + 1 == userinfo.size()) {
        throw UsageError(
            fmt::format("--store must be redis://[USER]:PASSWORD@HOST:PORT with a non-empty password "
                        "after the colon (got '{}')",
                        shown));
      }
      s.user = userinfo.substr(0, colon);
      s.password = userinfo.substr(colon + 1);
    }
    std::string port = "6379";
    if (!rest.empty() && rest[0] == '[') {  // [IPv6]:PORT
      const size_t close = rest.find(']');
      if (close != std::string::npos) {
        s.host = rest.substr(1, close - 1);
        if (close + 1 < rest.size()) port = rest[close + 1] == ':' ? rest.substr(close + 2) : "x";
      }
    } else {
      const size_t colon = rest.rfind(':');
      s.host = rest.substr(0, colon);
      if (colon != std::string::npos) port = rest.substr(colon + 1);
    }
    int64_t p = 0;
    try {
      p = parse_int("--store port", port);
    } catch (const UsageError&) {
      p = 0;
    }
    if (s.host.empty() || p < 1 || p > 65535) {
      throw UsageError(fmt::format("--store must be redis://HOST:PORT with a port in [1, 65535] (got '{}')", shown));
    }
    s.port = static_cast<int>(p);
    return s;
  }
  throw UsageError(fmt::format("--store must be file:DIR, redis://HOST:PORT or tcp://HOST:PORT (got '{}')",
                               text.find('@') == std::string::npos ? text : "..."));
}

void check_run_id(const std::string& id) {
  const bool ok =
      !id.empty() && id.size() <= 64 && id != "." && id != ".." &&
      id.find_first_not_of("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789._-") == std::string::npos;
  if (!ok) throw UsageError(fmt::format("--run-id must be 1 to 64 characters from A-Z a-z 0-9 . _ - (got '{}')", id));
}

void check_store(const StoreSpec& spec) {
  if (spec.kind == "file") {
    check_directory(spec.path);
  } else if (spec.kind == "tcp") {
    open_tcp_store(spec);
  } else {
    redis_open(with_env_password(spec));
  }
}

std::shared_ptr<Store> open_store(const StoreSpec& spec, const std::string& run_id) {
  check_run_id(run_id);
  std::shared_ptr<Store> s;
  if (spec.kind == "file") {
    check_directory(spec.path);
    s = std::make_shared<FileStore>(spec.path);
  } else if (spec.kind == "tcp") {
    s = open_tcp_store(spec);
  } else {
    s = std::make_shared<RedisStore>(with_env_password(spec));
  }
  s->run_id = s->scope = run_id;
  s->enter(run_id);  // a file store: DIR/<run-id>
  return s;
}

void store_set(Store& s, const std::string& key, const std::string& value) { s.put(s.key(key), value); }

std::string store_get(Store& s, const std::string& key, milliseconds timeout) {
  std::optional<std::string> v;
  if (!poll_until(Clock::now() + timeout, [&] { return (v = s.fetch(s.key(key))).has_value(); })) {
    throw SetupError(fmt::format("no '{}' in {} within {} ms", key, s.describe, timeout.count()));
  }
  return *v;
}

}  // namespace ddplab::dist
