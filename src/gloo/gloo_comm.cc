#include "src/gloo/gloo_comm.h"

#include <fcntl.h>
#include <netdb.h>
#include <poll.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstring>
#include <optional>
#include <set>
#include <thread>

#include <gloo/allgather.h>
#include <gloo/allreduce.h>
#include <gloo/barrier.h>
#include <gloo/broadcast.h>
#include <gloo/math.h>
#include <gloo/rendezvous/context.h>
#include <gloo/rendezvous/store.h>
#include <gloo/transport/tcp/address.h>
#include <gloo/transport/tcp/device.h>

#include <fmt/format.h>

#include "src/flags.h"

namespace ddplab::verify {

using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;

namespace {

constexpr size_t kMaxValueBytes = 1 << 20;        // the largest value a store may hand us (addresses: 8.5 KiB)
constexpr int kStoreIoMs = 5000;                 // one Redis round trip, connecting, AUTH, PING
constexpr const char* kExpirySeconds = "604800";  // Redis keys expire after a week: a shared server stays clean
constexpr size_t kTokenHex = 32;                 // nonces and tokens: 128 random bits, hex

// Gloo's exception texts start with "[./gloo/file.cc:27] " and may run over lines: keep the message.
std::string gloo_message(const std::exception& e) {
  std::string what = e.what();
  if (const size_t nl = what.find('\n'); nl != std::string::npos) what.resize(nl);
  if (!what.empty() && what[0] == '[') {
    if (const size_t close = what.find("] "); close != std::string::npos) what = what.substr(close + 2);
  }
  return what.substr(0, 200);
}

// A server's text in one line, at most 200 characters.
std::string one_line(std::string s) {
  for (char& c : s) {
    if (c == '\r' || c == '\n') c = ' ';
  }
  return s.substr(0, 200);
}

std::string random_hex() {
  unsigned char bytes[kTokenHex / 2];
  size_t got = 0;
  while (got < sizeof bytes) {
    const ssize_t n = getrandom(bytes + got, sizeof bytes - got, 0);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) throw SetupError(fmt::format("getrandom: {}", std::strerror(errno)));
    got += static_cast<size_t>(n);
  }
  std::string hex;
  for (unsigned char b : bytes) hex += fmt::format("{:02x}", b);
  return hex;
}

bool is_token(const std::string& s) {
  return s.size() == kTokenHex && s.find_first_not_of("0123456789abcdef") == std::string::npos;
}

milliseconds left(Clock::time_point deadline) {
  return std::max(milliseconds(0), std::chrono::duration_cast<milliseconds>(deadline - Clock::now()));
}

// ---------------------------------------------------------------------------------------------------------
// A minimal Redis client (RESP2 over TCP) whose every wait has a deadline: hiredis, inside Gloo's
// RedisStore, blocks forever on a server that never answers and knows no AUTH.

struct RedisIoError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

struct Reply {
  char type = 0;  // '+' status, '-' error, ':' integer, '$' bulk
  std::string str;
  int64_t integer = 0;
  bool nil = false;
};

class RedisConn {
 public:
  ~RedisConn() {
    if (fd_ >= 0) close(fd_);
  }
  // "" or why not.
  std::string connect_to(const std::string& host, int port, int timeout_ms) {
    addrinfo hints{}, *res = nullptr;
    hints.ai_socktype = SOCK_STREAM;
    if (int rc = getaddrinfo(host.c_str(), std::to_string(port).c_str(), &hints, &res); rc != 0) {
      return fmt::format("cannot resolve '{}': {}", host, gai_strerror(rc));
    }
    std::string why = "no address";
    for (addrinfo* a = res; a; a = a->ai_next) {
      const int fd = socket(a->ai_family, a->ai_socktype | SOCK_NONBLOCK | SOCK_CLOEXEC, a->ai_protocol);
      if (fd < 0) continue;
      if (connect(fd, a->ai_addr, a->ai_addrlen) != 0 && errno != EINPROGRESS) {
        why = std::strerror(errno);
      } else if (!wait_fd(fd, POLLOUT, Clock::now() + milliseconds(timeout_ms))) {
        why = "connection timed out";
      } else {
        int err = 0;
        socklen_t len = sizeof err;
        getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &len);
        if (err == 0) {
          fd_ = fd;
          break;
        }
        why = std::strerror(err);
      }
      close(fd);
    }
    freeaddrinfo(res);
    return fd_ >= 0 ? "" : why;
  }

  // One command, its arguments as RESP bulk strings. Throws RedisIoError when the connection fails, the
  // reply does not come within `timeout_ms`, is not RESP, or carries a bulk string over `max_bulk` bytes.
  Reply command(const std::vector<std::string>& args, int timeout_ms = kStoreIoMs, size_t max_bulk = kMaxValueBytes) {
    if (fd_ < 0) throw RedisIoError("not connected");
    const auto deadline = Clock::now() + milliseconds(timeout_ms);
    std::string out = fmt::format("*{}\r\n", args.size());
    for (const std::string& a : args) out += fmt::format("${}\r\n", a.size()) + a + "\r\n";
    for (size_t sent = 0; sent < out.size();) {
      if (!wait_fd(fd_, POLLOUT, deadline)) fail(fmt::format("cannot send within {} ms", timeout_ms));
      const ssize_t n = send(fd_, out.data() + sent, out.size() - sent, MSG_NOSIGNAL);
      if (n < 0 && (errno == EAGAIN || errno == EINTR)) continue;
      if (n <= 0) fail(std::strerror(errno));
      sent += static_cast<size_t>(n);
    }
    Reply r;
    const std::string line = read_line(deadline, timeout_ms);
    if (line.empty()) fail("not a RESP reply");
    r.type = line[0];
    const std::string rest = line.substr(1);
    switch (r.type) {
      case '+':
      case '-':
        r.str = rest;
        return r;
      case ':':
        r.integer = parse_number(rest);
        return r;
      case '$': {
        const int64_t n = parse_number(rest);
        if (n < 0) {
          r.nil = true;
          return r;
        }
        if (static_cast<uint64_t>(n) > max_bulk) {
          fail(fmt::format("a value of {} bytes, over the limit of {} bytes", n, max_bulk));
        }
        const std::string body = read_exact(static_cast<size_t>(n) + 2, deadline, timeout_ms);
        if (body.compare(body.size() - 2, 2, "\r\n") != 0) fail("not a RESP reply");
        r.str = body.substr(0, body.size() - 2);
        return r;
      }
      default:
        fail("not a RESP reply");
    }
  }

 private:
  static bool wait_fd(int fd, short events, Clock::time_point deadline) {
    for (;;) {
      pollfd p{fd, events, 0};
      const int rc = poll(&p, 1, static_cast<int>(left(deadline).count()));
      if (rc < 0 && errno == EINTR) continue;
      return rc == 1 && (p.revents & (events | POLLERR | POLLHUP)) != 0;
    }
  }
  [[noreturn]] void fail(const std::string& why) {
    close(fd_);  // the stream's position is unknown: never read from it again
    fd_ = -1;
    throw RedisIoError(why);
  }
  int64_t parse_number(const std::string& s) {
    errno = 0;
    char* end = nullptr;
    const long long v = std::strtoll(s.c_str(), &end, 10);
    if (s.empty() || *end != '\0' || errno != 0) fail("not a RESP reply");
    return v;
  }
  void fill(Clock::time_point deadline, int timeout_ms) {
    char chunk[4096];
    for (;;) {
      if (!wait_fd(fd_, POLLIN, deadline)) fail(fmt::format("no reply within {} ms", timeout_ms));
      const ssize_t n = recv(fd_, chunk, sizeof chunk, 0);
      if (n < 0 && (errno == EAGAIN || errno == EINTR)) continue;
      if (n == 0) fail("the connection was closed");
      if (n < 0) fail(std::strerror(errno));
      buf_.append(chunk, static_cast<size_t>(n));
      return;
    }
  }
  std::string read_line(Clock::time_point deadline, int timeout_ms) {
    size_t eol;
    while ((eol = buf_.find("\r\n")) == std::string::npos) {
      if (buf_.size() > 4096) fail("not a RESP reply");
      fill(deadline, timeout_ms);
    }
    std::string line = buf_.substr(0, eol);
    buf_.erase(0, eol + 2);
    return line;
  }
  std::string read_exact(size_t n, Clock::time_point deadline, int timeout_ms) {
    while (buf_.size() < n) fill(deadline, timeout_ms);
    std::string out = buf_.substr(0, n);
    buf_.erase(0, n);
    return out;
  }

  int fd_ = -1;
  std::string buf_;
};

std::string redis_where(const StoreSpec& s) { return fmt::format("the Redis store at {}:{}", s.host, s.port); }

// Connects, sends AUTH when a password is known, then PING; every failure is one line naming the cause.
std::unique_ptr<RedisConn> redis_open(const StoreSpec& s, int timeout_ms = kStoreIoMs) {
  const std::string where = redis_where(s);
  auto c = std::make_unique<RedisConn>();
  if (std::string why = c->connect_to(s.host, s.port, timeout_ms); !why.empty()) {
    throw SetupError(fmt::format("cannot reach {}: {}", where, why));
  }
  const auto not_redis = [&](const std::string& why) {
    return SetupError(fmt::format("cannot reach {}: the port is in use by something that is not Redis ({})", where, why));
  };
  Reply r;
  if (!s.password.empty()) {
    std::vector<std::string> auth = {"AUTH"};
    if (!s.user.empty()) auth.push_back(s.user);
    auth.push_back(s.password);
    try {
      r = c->command(auth, timeout_ms);
    } catch (const RedisIoError& e) {
      throw not_redis(fmt::format("AUTH: {}", e.what()));
    }
    if (r.type == '-') {
      if (r.str.find("without any password configured") != std::string::npos ||
          r.str.find("no password is set") != std::string::npos) {
        throw SetupError(fmt::format("{} has no password set, but one was given (in --store or DDPLAB_REDIS_PASSWORD)", where));
      }
      throw SetupError(fmt::format("{} refused the password: {}", where, one_line(r.str)));
    }
    if (r.type != '+') throw not_redis("unexpected reply to AUTH");
  }
  try {
    r = c->command({"PING"}, timeout_ms);
  } catch (const RedisIoError& e) {
    throw not_redis(fmt::format("no PONG within {} ms: {}", timeout_ms, e.what()));
  }
  if (r.type == '-' && r.str.rfind("NOAUTH", 0) == 0) {
    throw SetupError(fmt::format("{} needs a password: give --store redis://:PASSWORD@{}:{} or set DDPLAB_REDIS_PASSWORD",
                                 where, s.host, s.port));
  }
  if (r.type == '-') throw SetupError(fmt::format("{} refused PING: {}", where, one_line(r.str)));
  if (r.type != '+' || r.str != "PONG") throw not_redis("no PONG");
  return c;
}

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

}  // namespace

enum class Life { alive, gone, unknown };

// ---------------------------------------------------------------------------------------------------------
// The store: whole keys ("<run-id>/<nonce>/<key>"), values checked for size, and each rank's liveness
// (a lock or a connection that its process holds until it ends: observing it costs nothing on the
// success path).

class Store {
 public:
  virtual ~Store() = default;
  virtual void put(const std::string& key, const std::string& value) = 0;  // overwrites
  virtual std::optional<std::string> fetch(const std::string& key) = 0;
  virtual bool exists(const std::string& key) = 0;
  virtual void enter(const std::string& /*scope*/) {}  // a file store makes the directory
  // This process holds rank `rank`'s liveness in `scope` until it ends (or calls this again).
  virtual void hold_alive(const std::string& scope, int rank) = 0;
  virtual std::vector<Life> lives(const std::string& scope, int world_size) = 0;

  std::string key(const std::string& k) const { return scope + "/" + k; }

  std::string describe;     // "the file store /tmp/x" | "the Redis store at h:p"
  std::string run_id;       // --run-id
  std::string scope;        // run_id, then run_id/nonce once joined
  bool joined = false;
};

namespace {

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
      throw SetupError(fmt::format("{} is not a store value ({} bytes; the limit is {}): the store must hold only "
                                   "this run's keys", path, st.st_size, kMaxValueBytes));
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
      if (fcntl(fd, F_OFD_GETLK, &fl) == 0) out[static_cast<size_t>(r)] = fl.l_type == F_UNLCK ? Life::gone : Life::alive;
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
      out[static_cast<size_t>(r)] = list.str.find(" name=" + name + " ") != std::string::npos ? Life::alive : Life::gone;
    }
    return out;
  }

 private:
  static std::string client_name(const std::string& scope, int rank) { return fmt::format("ddplab/{}/{}", scope, rank); }
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

// Polls `ready` every 10 ms until it says yes (true) or the deadline passes (false).
template <typename F>
bool poll_until(Clock::time_point deadline, F ready) {
  for (;;) {
    if (ready()) return true;
    if (Clock::now() >= deadline) return false;
    std::this_thread::sleep_for(milliseconds(10));
  }
}

std::string rank_list(const std::vector<int>& ranks) {
  return fmt::format("rank{} {}", ranks.size() > 1 ? "s" : "", fmt::join(ranks, ", "));
}

// Gloo's view of the store: its keys below the run's nonce, every wait bounded by the run's deadline,
// every value it reads checked (Gloo would trust a planted address and connect to it).
class GlooView : public gloo::rendezvous::Store {
 public:
  GlooView(verify::Store& s, int rank, int world_size, Clock::time_point deadline, std::string failure)
      : s_(s), rank_(rank), ws_(world_size), deadline_(deadline), failure_(std::move(failure)) {}

  void set(const std::string& key, const std::vector<char>& data) override {
    s_.put(s_.key(key), std::string(data.begin(), data.end()));
  }
  std::vector<char> get(const std::string& key) override {
    wait({key});
    const std::optional<std::string> v = s_.fetch(s_.key(key));
    if (!v) throw SetupError(fmt::format("rank {}: {} rank {}'s {} vanished from {}", rank_, failure_, owner(key), what(key), s_.describe));
    check(key, *v);
    return std::vector<char>(v->begin(), v->end());
  }
  void wait(const std::vector<std::string>& keys) override { wait(keys, left(deadline_)); }
  void wait(const std::vector<std::string>& keys, const milliseconds&) override {
    for (const std::string& k : keys) {
      if (!poll_until(deadline_, [&] { return s_.exists(s_.key(k)); })) {
        throw SetupError(fmt::format("rank {}: {} rank {} never published its {}", rank_, failure_, owner(k), what(k)));
      }
    }
  }

 private:
  // Gloo's keys: "rank_<r>" (host name) and "<r>" (the addresses of rank r's pairs, one per other rank).
  static bool is_address_key(const std::string& k) {
    return !k.empty() && k.find_first_not_of("0123456789") == std::string::npos;
  }
  static std::string owner(const std::string& k) { return is_address_key(k) ? k : k.substr(k.find('_') + 1); }
  static const char* what(const std::string& k) { return is_address_key(k) ? "address" : "host name"; }

  void check(const std::string& key, const std::string& v) const {
    const std::string trailer = "the store must hold only this run's keys";
    if (!is_address_key(key)) {
      const bool ok = !v.empty() && v.size() <= 255 &&
                      std::all_of(v.begin(), v.end(), [](char c) { return c > ' ' && c < 127; });
      if (!ok) {
        throw SetupError(fmt::format("rank {}: rank {}'s host name in the store is not a host name ({} bytes, at "
                                     "most 255 printable): {}", rank_, owner(key), v.size(), trailer));
      }
      return;
    }
    const size_t one = gloo::transport::tcp::Address().bytes().size();
    const size_t want = one * static_cast<size_t>(ws_ - 1);
    if (v.size() != want) {
      throw SetupError(fmt::format("rank {}: rank {}'s address in the store is not a Gloo address ({} bytes, "
                                   "expected {} = {} x {}): {}", rank_, owner(key), v.size(), want, ws_ - 1, one, trailer));
    }
    for (size_t i = 0; i < static_cast<size_t>(ws_ - 1); ++i) {
      // Each entry: a sockaddr_storage (this Gloo listens once per pair), then a sequence number.
      sockaddr_storage ss{};
      std::memcpy(&ss, v.data() + i * one, sizeof ss);
      uint16_t port = 0;
      if (ss.ss_family == AF_INET) port = reinterpret_cast<const sockaddr_in*>(&ss)->sin_port;
      if (ss.ss_family == AF_INET6) port = reinterpret_cast<const sockaddr_in6*>(&ss)->sin6_port;
      if (port == 0) {
        throw SetupError(fmt::format("rank {}: rank {}'s address in the store is not a Gloo address (entry {}: "
                                     "family {}, port 0; expected an IPv4 or IPv6 address with a port): {}", rank_,
                                     owner(key), i, ss.ss_family, trailer));
      }
    }
  }

  verify::Store& s_;
  int rank_, ws_;
  Clock::time_point deadline_;
  std::string failure_;
};

void join_until(Store& s, int rank, int ws, Clock::time_point deadline, const std::string& failure) {
  if (s.joined) return;
  const std::string base = s.run_id;
  const std::string nonce_key = base + "/nonce";
  if (rank == 0) {
    const std::string nonce = random_hex();
    const std::string scope = base + "/" + nonce;
    s.enter(scope);
    s.hold_alive(scope, 0);
    s.put(nonce_key, nonce);  // from here on, ranks that read an older nonce learn that it is stale
    std::vector<std::string> tokens(static_cast<size_t>(ws), std::string(kTokenHex, '0'));
    std::set<int> missing;
    for (int r = 1; r < ws; ++r) missing.insert(r);
    auto next_check = Clock::now();
    const bool all = poll_until(deadline, [&] {
      for (auto it = missing.begin(); it != missing.end();) {
        const auto v = s.fetch(fmt::format("{}/join_{}", scope, *it));
        if (v && !is_token(*v)) {
          throw SetupError(fmt::format("rank 0: rank {}'s token in {} is malformed ({} bytes): the store must hold "
                                       "only this run's keys", *it, s.describe, v->size()));
        }
        if (v) tokens[static_cast<size_t>(*it)] = *v;
        it = v ? missing.erase(it) : std::next(it);
      }
      if (!missing.empty() && Clock::now() >= next_check) {  // another rank 0 on this run id?
        next_check = Clock::now() + milliseconds(200);
        if (s.fetch(nonce_key) != nonce) {
          throw SetupError(fmt::format("rank 0: another rank 0 started run '{}' in {} at the same time: give each "
                                       "run its own --run-id", base, s.describe));
        }
      }
      return missing.empty();
    });
    if (!all) {
      const std::vector<int> m(missing.begin(), missing.end());
      throw SetupError(fmt::format("rank 0: {} {} never joined run '{}' (not started, exited, or cannot reach {})",
                                   failure, rank_list(m), base, s.describe));
    }
    std::string go;
    for (const std::string& t : tokens) go += t;
    s.put(scope + "/go", go);
    s.scope = scope;
  } else {
    const std::string token = random_hex();
    std::string stale, last_seen;
    for (;;) {
      // Rank 0's nonce; one whose "go" did not echo this rank's token belongs to an earlier run.
      std::optional<std::string> nonce;
      const bool found = poll_until(deadline, [&] {
        nonce = s.fetch(nonce_key);
        if (nonce) last_seen = *nonce;
        return nonce && is_token(*nonce) && *nonce != stale;
      });
      if (!found) {
        const std::string why =
            last_seen.empty()      ? "rank 0 never opened it"
            : !is_token(last_seen) ? "its nonce in the store is malformed and rank 0 never replaced it"
                                   : fmt::format("rank 0 never confirmed this rank (only an earlier run's keys are there, "
                                                 "or another process was started as rank {})", rank);
        throw SetupError(fmt::format("rank {}: {} cannot join run '{}' in {}: {}", rank, failure, base, s.describe, why));
      }
      const std::string scope = base + "/" + *nonce;
      s.enter(scope);
      s.hold_alive(scope, rank);
      s.put(fmt::format("{}/join_{}", scope, rank), token);
      std::optional<std::string> go;
      auto next_check = Clock::now() + milliseconds(100);
      bool moved = false;
      const bool answered = poll_until(deadline, [&] {
        go = s.fetch(scope + "/go");
        if (go) return true;
        if (Clock::now() >= next_check) {
          next_check = Clock::now() + milliseconds(100);
          moved = s.fetch(nonce_key) != *nonce;
        }
        return moved;
      });
      if (!answered) {
        throw SetupError(fmt::format("rank {}: {} rank 0 never confirmed this rank in run '{}' (rank 0 not started, "
                                     "exited, or two ranks {} were started)", rank, failure, base, rank));
      }
      if (moved) continue;
      const size_t at = static_cast<size_t>(rank) * kTokenHex;
      if (go->size() == static_cast<size_t>(ws) * kTokenHex && go->compare(at, kTokenHex, token) == 0) {
        s.scope = scope;
        break;
      }
      stale = *nonce;  // an earlier run's "go" (or another process with this rank): wait for a fresh nonce
    }
  }
  s.joined = true;
}

}  // namespace

StoreSpec parse_store(const std::string& text) {
  StoreSpec s;
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
      shown = "redis://" + (colon == std::string::npos ? std::string("***") : userinfo.substr(0, colon) + ":***") + "@" + rest;
      if (colon == std::string::npos || colon + 1 == userinfo.size()) {
        throw UsageError(fmt::format("--store must be redis://[USER]:PASSWORD@HOST:PORT with a non-empty password "
                                     "after the colon (got '{}')", shown));
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
  throw UsageError(fmt::format("--store must be file:DIR or redis://HOST:PORT (got '{}')",
                               text.find('@') == std::string::npos ? text : "..."));
}

void check_run_id(const std::string& id) {
  const bool ok = !id.empty() && id.size() <= 64 && id != "." && id != ".." &&
                  id.find_first_not_of("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789._-") ==
                      std::string::npos;
  if (!ok) throw UsageError(fmt::format("--run-id must be 1 to 64 characters from A-Z a-z 0-9 . _ - (got '{}')", id));
}

void check_store(const StoreSpec& spec) {
  if (spec.kind == "file") {
    check_directory(spec.path);
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
  } else {
    s = std::make_shared<RedisStore>(with_env_password(spec));
  }
  s->run_id = s->scope = run_id;
  s->enter(run_id);  // a file store: DIR/<run-id>
  return s;
}

void join_run(Store& s, int rank, int world_size, milliseconds timeout, const std::string& failure) {
  join_until(s, rank, world_size, Clock::now() + timeout, failure);
}

void store_set(Store& s, const std::string& key, const std::string& value) { s.put(s.key(key), value); }

std::string store_get(Store& s, const std::string& key, milliseconds timeout) {
  std::optional<std::string> v;
  if (!poll_until(Clock::now() + timeout, [&] { return (v = s.fetch(s.key(key))).has_value(); })) {
    throw SetupError(fmt::format("no '{}' in {} within {} ms", key, s.describe, timeout.count()));
  }
  return *v;
}

std::string resolve_bind(const std::string& address) {
  if (address.empty() || address.size() > 253) {
    throw UsageError(fmt::format("--bind must be a host name or address of this machine, 1 to 253 characters (got {})",
                                 address.size()));
  }
  addrinfo hints{}, *res = nullptr;
  hints.ai_socktype = SOCK_STREAM;
  if (int rc = getaddrinfo(address.c_str(), nullptr, &hints, &res); rc != 0 || !res) {
    throw UsageError(fmt::format("--bind '{}' does not resolve: {}", address, rc != 0 ? gai_strerror(rc) : "no address"));
  }
  std::string numeric, why = "no usable address";
  for (addrinfo* a = res; a && numeric.empty(); a = a->ai_next) {
    char host[NI_MAXHOST];
    if (getnameinfo(a->ai_addr, a->ai_addrlen, host, sizeof host, nullptr, 0, NI_NUMERICHOST) != 0) continue;
    const int fd = socket(a->ai_family, a->ai_socktype | SOCK_CLOEXEC, a->ai_protocol);
    if (fd < 0) {
      why = fmt::format("{}: {}", host, std::strerror(errno));
      continue;
    }
    if (bind(fd, a->ai_addr, a->ai_addrlen) == 0) {
      numeric = host;
    } else {
      why = fmt::format("{}: {}", host, std::strerror(errno));
    }
    close(fd);
  }
  freeaddrinfo(res);
  if (numeric.empty()) {
    throw UsageError(fmt::format("--bind '{}' is not an address of this machine (cannot listen on {})", address, why));
  }
  return numeric;
}

// How long a failed rank waits for its peers' own reports before naming the silent ones. A peer that is
// gone is seen at once (its liveness lock or connection), and live survivors report within milliseconds
// (the failing rank closes its connections, so peers blocked on it fail too): a short window suffices,
// and keeps the promise that survivors exit within --timeout + 2 s even when a peer hangs.
milliseconds blame_window(milliseconds timeout) {
  return std::clamp(timeout, milliseconds(200), milliseconds(1500));
}

std::string name_silent_peers(Store& store, int rank, int world_size, const std::string& what, milliseconds window) {
  std::vector<int> gone, silent;
  try {
    store.put(store.key(fmt::format("failed_{}", rank)), what);
    std::set<int> pending;
    for (int r = 0; r < world_size; ++r) {
      if (r != rank) pending.insert(r);
    }
    const auto deadline = Clock::now() + window;
    for (;;) {
      const std::vector<Life> lives = store.lives(store.scope, world_size);
      for (auto it = pending.begin(); it != pending.end();) {
        if (store.exists(store.key(fmt::format("failed_{}", *it)))) {  // it reported a failure of its own
          it = pending.erase(it);
        } else if (lives[static_cast<size_t>(*it)] == Life::gone) {    // its process ended without a word
          gone.push_back(*it);
          it = pending.erase(it);
        } else {
          ++it;
        }
      }
      if (pending.empty() || Clock::now() >= deadline) break;
      std::this_thread::sleep_for(milliseconds(20));
    }
    silent.assign(pending.begin(), pending.end());
  } catch (const std::exception& e) {  // the store itself is gone: say so
    return fmt::format("the peers cannot be named ({})", one_line(e.what()));
  }
  std::vector<std::string> parts;
  if (!gone.empty()) {
    parts.push_back(fmt::format("{} exited or hangs: {} gone", rank_list(gone),
                                gone.size() > 1 ? "their processes are" : "its process is"));
  }
  if (!silent.empty()) {
    parts.push_back(fmt::format("{} exited or hangs: alive, but no failure reported within {} ms", rank_list(silent),
                                window.count()));
  }
  if (parts.empty()) return "every peer reports the same failure";
  return fmt::format("{}", fmt::join(parts, "; "));
}

namespace {

class GlooComm : public comm::Communicator {
 public:
  GlooComm(std::shared_ptr<Store> store, std::shared_ptr<gloo::rendezvous::Context> ctx)
      : store_(std::move(store)), ctx_(std::move(ctx)) {}
  int rank() const override { return ctx_->rank; }
  int world_size() const override { return ctx_->size; }
  std::string backend() const override { return "gloo"; }

  void all_reduce(float* data, size_t n, comm::ReduceOp op) override {
    if (op == comm::ReduceOp::avg) throw comm::CommError("Gloo has no AVG reduction: pre-divide and SUM");
    run("all_reduce", [&](uint32_t tag) {
      gloo::AllreduceOptions opts(ctx_);
      opts.setOutput(data, n);
      opts.setReduceFunction(static_cast<void (*)(void*, const void*, const void*, size_t)>(&gloo::sum<float>));
      opts.setAlgorithm(gloo::AllreduceOptions::Algorithm::RING);  // what ProcessGroupGloo ends up using
      opts.setTag(tag);
      opts.setTimeout(timeout);
      gloo::allreduce(opts);
    });
  }
  void broadcast(float* data, size_t n, int root) override {
    run("broadcast", [&](uint32_t tag) {
      gloo::BroadcastOptions opts(ctx_);
      opts.setOutput(data, n);
      opts.setRoot(root);
      opts.setTag(tag);
      opts.setTimeout(timeout);
      gloo::broadcast(opts);
    });
  }
  void all_gather(const void* in, size_t bytes, void* out) override {
    run("all_gather", [&](uint32_t tag) {
      gloo::AllgatherOptions opts(ctx_);
      opts.setInput(const_cast<char*>(static_cast<const char*>(in)), bytes);
      opts.setOutput(static_cast<char*>(out), bytes * static_cast<size_t>(ctx_->size));
      opts.setTag(tag);
      opts.setTimeout(timeout);
      gloo::allgather(opts);
    });
  }
  void barrier() override {
    run("barrier", [&](uint32_t tag) {
      gloo::BarrierOptions opts(ctx_);
      opts.setTag(tag);
      opts.setTimeout(timeout);
      gloo::barrier(opts);
    });
  }

 private:
  template <typename F>
  void run(const char* name, F f) {
    const uint64_t seq = seq_++;
    if (!broken_.empty()) {
      throw comm::CommError(fmt::format("rank {}: {} #{} refused: the connections were closed after {} failed",
                                        ctx_->rank, name, seq, broken_));
    }
    try {
      f(static_cast<uint32_t>(seq));
    } catch (const std::exception& e) {
      const std::string why = gloo_message(e);
      broken_ = fmt::format("{} #{}", name, seq);
      // Close every connection first: a peer blocked on this rank fails now and reports too, instead of
      // waiting out its own timeout while this rank waits for its report.
      try {
        ctx_->closeConnections();
      } catch (const std::exception&) {
      }
      const std::string peers = name_silent_peers(*store_, ctx_->rank, ctx_->size, broken_, blame_window(timeout));
      throw comm::CommError(fmt::format("rank {}: {} failed after at most {} ms: {} (gloo: {})", ctx_->rank, broken_,
                                        timeout.count(), peers, why));
    }
  }

  std::shared_ptr<Store> store_;
  std::shared_ptr<gloo::rendezvous::Context> ctx_;
  uint64_t seq_ = 0;
  std::string broken_;
};

}  // namespace

std::unique_ptr<comm::Communicator> connect_gloo(std::shared_ptr<Store> store, int rank, int world_size,
                                                 const std::string& bind_address, milliseconds timeout) {
  const auto deadline = Clock::now() + timeout;
  const std::string failure = fmt::format("rendezvous of {} ranks failed within {} ms:", world_size, timeout.count());
  gloo::transport::tcp::attr attr;
  attr.hostname = resolve_bind(bind_address);  // Gloo itself crashes on a name that does not resolve
  std::shared_ptr<gloo::transport::Device> device;
  try {
    device = gloo::transport::tcp::CreateDevice(attr);
  } catch (const std::exception& e) {
    throw SetupError(fmt::format("cannot open a TCP device on '{}': {}", bind_address, gloo_message(e)));
  }
  join_until(*store, rank, world_size, deadline, failure);
  auto ctx = std::make_shared<gloo::rendezvous::Context>(rank, world_size);
  ctx->setTimeout(std::max(left(deadline), milliseconds(100)));
  GlooView view(*store, rank, world_size, deadline, failure);
  try {
    ctx->connectFullMesh(view, device);
  } catch (const SetupError&) {
    throw;
  } catch (const std::exception& e) {
    throw SetupError(fmt::format("rank {}: {} {}", rank, failure, gloo_message(e)));
  }
  auto c = std::make_unique<GlooComm>(std::move(store), std::move(ctx));
  c->timeout = timeout;
  return c;
}

}  // namespace ddplab::verify
