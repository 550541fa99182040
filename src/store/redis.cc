#include "src/store/redis.h"

#include <netdb.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>

#include <fmt/format.h>

namespace ddplab::dist {

using std::chrono::milliseconds;

RedisConn::~RedisConn() {
  if (fd_ >= 0) close(fd_);
}

std::string RedisConn::connect_to(const std::string& host, int port, int timeout_ms) {
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

Reply RedisConn::command(const std::vector<std::string>& args, int timeout_ms, size_t max_bulk) {
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

bool RedisConn::wait_fd(int fd, short events, Clock::time_point deadline) {
  for (;;) {
    pollfd p{fd, events, 0};
    const int rc = poll(&p, 1, static_cast<int>(left(deadline).count()));
    if (rc < 0 && errno == EINTR) continue;
    return rc == 1 && (p.revents & (events | POLLERR | POLLHUP)) != 0;
  }
}

void RedisConn::fail(const std::string& why) {
  close(fd_);  // the stream's position is unknown: never read from it again
  fd_ = -1;
  throw RedisIoError(why);
}

int64_t RedisConn::parse_number(const std::string& s) {
  errno = 0;
  char* end = nullptr;
  const long long v = std::strtoll(s.c_str(), &end, 10);
  if (s.empty() || *end != '\0' || errno != 0) fail("not a RESP reply");
  return v;
}

void RedisConn::fill(Clock::time_point deadline, int timeout_ms) {
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

std::string RedisConn::read_line(Clock::time_point deadline, int timeout_ms) {
  size_t eol;
  while ((eol = buf_.find("\r\n")) == std::string::npos) {
    if (buf_.size() > 4096) fail("not a RESP reply");
    fill(deadline, timeout_ms);
  }
  std::string line = buf_.substr(0, eol);
  buf_.erase(0, eol + 2);
  return line;
}

std::string RedisConn::read_exact(size_t n, Clock::time_point deadline, int timeout_ms) {
  while (buf_.size() < n) fill(deadline, timeout_ms);
  std::string out = buf_.substr(0, n);
  buf_.erase(0, n);
  return out;
}

std::string redis_where(const StoreSpec& s) { return fmt::format("the Redis store at {}:{}", s.host, s.port); }

// Connects, sends AUTH when a password is known, then PING; every failure is one line naming the cause.
std::unique_ptr<RedisConn> redis_open(const StoreSpec& s, int timeout_ms) {
  const std::string where = redis_where(s);
  auto c = std::make_unique<RedisConn>();
  if (std::string why = c->connect_to(s.host, s.port, timeout_ms); !why.empty()) {
    throw SetupError(fmt::format("cannot reach {}: {}", where, why));
  }
  const auto not_redis = [&](const std::string& why) {
    return SetupError(
        fmt::format("cannot reach {}: the port is in use by something that is not Redis ({})", where, why));
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
        throw SetupError(
            fmt::format("{} has no password set, but one was given (in --store or DDPLAB_REDIS_PASSWORD)", where));
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
    throw SetupError(
        fmt::format("{} needs a password: give --store redis://:PASSWORD@{}:{} or set DDPLAB_REDIS_PASSWORD", where,
                    s.host, s.port));
  }
  if (r.type == '-') throw SetupError(fmt::format("{} refused PING: {}", where, one_line(r.str)));
  if (r.type != '+' || r.str != "PONG") throw not_redis("no PONG");
  return c;
}

}  // namespace ddplab::dist
