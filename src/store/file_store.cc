// A directory as the store (file_store.h).
#include "src/store/file_store.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstring>

#include <fmt/format.h>

namespace ddplab::dist {

namespace {

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

}  // namespace

void check_file_store(const StoreSpec& spec) { check_directory(spec.path); }

std::shared_ptr<Store> open_file_store(const StoreSpec& spec) {
  check_directory(spec.path);
  return std::make_shared<FileStore>(spec.path);
}

}  // namespace ddplab::dist
