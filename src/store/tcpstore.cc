#include "src/store/tcpstore.h"

#include <netdb.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include <fmt/format.h>

#include "src/store/deadline.h"

namespace ddplab::dist {

using std::chrono::milliseconds;

namespace {

constexpr uint32_t kMagic = 0x3C85F7CE;  // 2.x VALIDATE's magic number
constexpr char kV1Set = 0, kV1Get = 2, kV1Check = 4;
constexpr char kV2Validate = 0, kV2Set = 1, kV2Get = 3, kV2Check = 5, kV2Ping = 13;
constexpr const char* kPrefix = "/";  // PyTorch's TCPStore client prefixes every key with it

// The first probe's PING nonce, bytes 0A 70 FF 0A. A 1.x server reads VALIDATE + PING as a SET whose key
// length is made of the magic and the nonce's first three bytes: 0xFF at the top puts it over any vector's
// max_size, so the server throws at once and drops the connection, never waiting for more bytes.
constexpr uint32_t kProbeNonce = 0x0AFF700Au;

void put_u32(std::string& q, uint32_t v) {
  for (int i = 0; i < 4; ++i) q += static_cast<char>((v >> (8 * i)) & 0xFF);
}
void put_u64(std::string& q, uint64_t v) {
  for (int i = 0; i < 8; ++i) q += static_cast<char>((v >> (8 * i)) & 0xFF);
}
void put_str(std::string& q, const std::string& s) {
  put_u64(q, s.size());
  q += s;
}
uint64_t get_le(const std::string& s, size_t n) {
  uint64_t v = 0;
  for (size_t i = 0; i < n; ++i) v |= static_cast<uint64_t>(static_cast<unsigned char>(s[i])) << (8 * i);
  return v;
}

bool wait_fd(int fd, short events, Clock::time_point deadline) {
  for (;;) {
    pollfd p{fd, events, 0};
    const int rc = poll(&p, 1, static_cast<int>(left(deadline).count()));
    if (rc < 0 && errno == EINTR) continue;
    return rc == 1 && (p.revents & (events | POLLERR | POLLHUP)) != 0;
  }
}

// A connected non-blocking socket, or throws SetupError "cannot reach WHERE: why".
int connect_to(const std::string& host, int port, int timeout_ms, const std::string& where) {
  addrinfo hints{}, *res = nullptr;
  hints.ai_socktype = SOCK_STREAM;
  if (int rc = getaddrinfo(host.c_str(), std::to_string(port).c_str(), &hints, &res); rc != 0) {
    throw SetupError(fmt::format("cannot reach {}: cannot resolve '{}': {}", where, host, gai_strerror(rc)));
  }
  std::string why = "no address";
  int out = -1;
  for (addrinfo* a = res; a && out < 0; a = a->ai_next) {
    const int fd = socket(a->ai_family, a->ai_socktype | SOCK_NONBLOCK | SOCK_CLOEXEC, a->ai_protocol);
    if (fd < 0) continue;
    int err = 0;
    if (connect(fd, a->ai_addr, a->ai_addrlen) != 0 && errno != EINPROGRESS) {
      err = errno;
    } else if (!wait_fd(fd, POLLOUT, Clock::now() + milliseconds(timeout_ms))) {
      err = ETIMEDOUT;
    } else {
      socklen_t len = sizeof err;
      getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &len);
    }
    if (err == 0) {
      out = fd;
    } else {
      why = err == ETIMEDOUT ? "connection timed out" : std::strerror(err);
      close(fd);
    }
  }
  freeaddrinfo(res);
  if (out < 0) throw SetupError(fmt::format("cannot reach {}: {}", where, why));
  return out;
}

// "" or why not.
std::string send_all(int fd, const std::string& bytes, Clock::time_point deadline, int timeout_ms) {
  for (size_t sent = 0; sent < bytes.size();) {
    if (!wait_fd(fd, POLLOUT, deadline)) return fmt::format("cannot send within {} ms", timeout_ms);
    const ssize_t n = send(fd, bytes.data() + sent, bytes.size() - sent, MSG_NOSIGNAL);
    if (n < 0 && (errno == EAGAIN || errno == EINTR)) continue;
    if (n <= 0) return std::strerror(errno);
    sent += static_cast<size_t>(n);
  }
  return "";
}

enum class Got { enough, closed, timeout };

// Appends what arrives to `buf` until enough(buf), the peer closes (or resets) or the deadline passes.
template <typename F>
Got read_until(int fd, std::string& buf, Clock::time_point deadline, F enough) {
  char chunk[4096];
  while (!enough(buf)) {
    if (!wait_fd(fd, POLLIN, deadline)) return Got::timeout;
    const ssize_t n = recv(fd, chunk, sizeof chunk, 0);
    if (n < 0 && (errno == EAGAIN || errno == EINTR)) continue;
    if (n <= 0) return Got::closed;
    buf.append(chunk, static_cast<size_t>(n));
  }
  return Got::enough;
}

// One probe on a fresh connection: sends `query`, reads until enough(reply) (then keeps the connection in
// *kept when asked to).
template <typename F>
Got probe(const std::string& host, int port, int timeout_ms, const std::string& where, const std::string& query,
          std::string& reply, F enough, int* kept = nullptr) {
  const int fd = connect_to(host, port, timeout_ms, where);
  const auto deadline = Clock::now() + milliseconds(timeout_ms);
  Got got = Got::closed;
  if (send_all(fd, query, deadline, timeout_ms).empty()) got = read_until(fd, reply, deadline, enough);
  if (got == Got::enough && kept) {
    *kept = fd;
  } else {
    close(fd);
  }
  return got;
}

std::string validate_query() {
  std::string q(1, kV2Validate);
  put_u32(q, kMagic);
  return q;
}
std::string check0(char type) {
  std::string q(1, type);
  put_u64(q, 0);  // CHECK of no keys: "ready"
  return q;
}

}  // namespace

std::string tcpstore_where(const std::string& host, int port) {
  return fmt::format("the TCPStore at {}:{}", host, port);
}

// Probe 1, on two connections at once. (a) later 2.x: VALIDATE + PING, answered by the nonce; a 1.x server drops
// it (see kProbeNonce); Redis never answers it (its inline parser stops at the leading zero byte).
// (b) Redis: PING as RESP, answered "+PONG" (or "-NOAUTH ..."); every TCPStore drops it (unknown query type,
// or no VALIDATE first) or, the 2.x libuv server, ignores it. Both dropped: a 1.x server, or a 2.x one before PING.
// Probe 2 (1.x): CHECK of no keys, answered "ready" (a 2.x classic server drops it: no VALIDATE first).
// Probe 3 (2.x before PING; sent only once no 1.x server answered probe 2): VALIDATE + CHECK.
StoreServer identify_store_server(const std::string& host, int port, int timeout_ms) {
  const std::string where = fmt::format("the store at {}:{}", host, port);
  const auto neither = [&](const std::string& what) {
    return SetupError(fmt::format("cannot reach {}: it is neither PyTorch's TCPStore nor Redis ({})", where, what));
  };
  const std::string silent = fmt::format("no answer within {} ms", timeout_ms);
  std::string q = validate_query() + std::string(1, kV2Ping), r;
  put_u32(q, kProbeNonce);
  {
    const auto deadline = Clock::now() + milliseconds(timeout_ms);
    int fds[2] = {connect_to(host, port, timeout_ms, where), -1};
    try {
      fds[1] = connect_to(host, port, timeout_ms, where);
    } catch (const SetupError&) {
      close(fds[0]);
      throw;
    }
    std::string got[2];
    bool open[2] = {send_all(fds[0], q, deadline, timeout_ms).empty(),
                    send_all(fds[1], "*1\r\n$4\r\nPING\r\n", deadline, timeout_ms).empty()};
    std::optional<StoreServer> found;
    const char* odd = nullptr;
    while ((open[0] || open[1]) && !found && !odd) {
      pollfd p[2] = {{open[0] ? fds[0] : -1, POLLIN, 0}, {open[1] ? fds[1] : -1, POLLIN, 0}};
      const int rc = poll(p, 2, static_cast<int>(left(deadline).count()));
      if (rc < 0 && errno == EINTR) continue;
      if (rc <= 0) break;
      for (int i = 0; i < 2; ++i) {
        if (p[i].revents == 0) continue;
        char chunk[256];
        const ssize_t n = recv(fds[i], chunk, sizeof chunk, 0);
        if (n < 0 && (errno == EAGAIN || errno == EINTR)) continue;
        if (n <= 0) {
          open[i] = false;
          continue;
        }
        got[i].append(chunk, static_cast<size_t>(n));
      }
      if (got[0].size() >= 4) {
        if (got[0].size() == 4 && get_le(got[0], 4) == kProbeNonce) {
          found = StoreServer::tcpstore_v2;
        } else {
          odd = "an unexpected answer to TCPStore's PING";
        }
      } else if (!got[1].empty()) {
        if (got[1][0] != '+' && got[1][0] != '-') {
          odd = "an unexpected answer to Redis' PING";
        } else if (got[1].find("\r\n") != std::string::npos) {
          found = StoreServer::redis;
        }
      }
    }
    close(fds[0]);
    close(fds[1]);
    if (found) return *found;
    if (odd) throw neither(odd);
    if (open[0] || open[1]) throw neither(silent);
  }
  const auto one_byte = [](const std::string& b) { return !b.empty(); };
  r.clear();
  Got got = probe(host, port, timeout_ms, where, check0(kV1Check), r, one_byte);
  if (got == Got::enough) {
    if (r == std::string(1, '\0')) return StoreServer::tcpstore_v1;
    throw neither("an unexpected answer to TCPStore's CHECK");
  }
  if (got == Got::timeout) throw neither(silent);
  r.clear();
  got = probe(host, port, timeout_ms, where, validate_query() + check0(kV2Check), r, one_byte);
  if (got == Got::enough && r == std::string(1, '\0')) return StoreServer::tcpstore_v2;
  throw neither(got == Got::timeout ? silent : "it closed every connection without an answer");
}

TcpStoreConn::~TcpStoreConn() {
  if (fd_ >= 0) close(fd_);
}

std::unique_ptr<TcpStoreConn> TcpStoreConn::open(const std::string& host, int port, StoreServer server,
                                                 int timeout_ms) {
  auto c = std::unique_ptr<TcpStoreConn>(new TcpStoreConn());
  c->where_ = tcpstore_where(host, port);
  c->timeout_ms_ = timeout_ms;
  c->v2_ = server == StoreServer::tcpstore_v2;
  c->fd_ = connect_to(host, port, timeout_ms, c->where_);
  if (c->v2_) {  // the handshake every 2.x client sends first; an early 2.x server has no PING: CHECK instead
    const std::string reply = c->round(validate_query() + check0(kV2Check), 1);
    if (reply[0] != 0) throw SetupError(fmt::format("{}: VALIDATE failed: an unexpected answer", c->where_));
  }
  return c;
}

[[noreturn]] void TcpStoreConn::fail(const std::string& why) {
  close(fd_);  // the stream's position is unknown: never read from it again
  fd_ = -1;
  throw SetupError(fmt::format("{}: {}", where_, why));
}

std::string TcpStoreConn::round(const std::string& query, size_t reply_bytes) {
  if (fd_ < 0) throw SetupError(fmt::format("{}: the connection failed earlier", where_));
  if (!buf_.empty()) fail("bytes nobody asked for: not a TCPStore");
  const auto deadline = Clock::now() + milliseconds(timeout_ms_);
  if (std::string why = send_all(fd_, query, deadline, timeout_ms_); !why.empty()) fail(why);
  return take(reply_bytes, deadline);
}

std::string TcpStoreConn::take(size_t n, Clock::time_point deadline) {
  const Got got = read_until(fd_, buf_, deadline, [&](const std::string& b) { return b.size() >= n; });
  if (got == Got::timeout) fail(fmt::format("no reply within {} ms", timeout_ms_));
  if (got == Got::closed) fail("the server closed the connection");
  std::string out = buf_.substr(0, n);
  buf_.erase(0, n);
  return out;
}

void TcpStoreConn::set(const std::string& key, const std::string& value) {
  std::string q(1, v2_ ? kV2Set : kV1Set);
  put_str(q, kPrefix + key);
  put_str(q, value);
  round(q, 0);
}

bool TcpStoreConn::check(const std::string& key) {
  std::string q(1, v2_ ? kV2Check : kV1Check);
  put_u64(q, 1);
  put_str(q, kPrefix + key);
  const std::string r = round(q, 1);
  if (r[0] != 0 && r[0] != 1) throw SetupError(fmt::format("{}: CHECK: an unexpected answer", where_));
  return r[0] == 0;
}

std::optional<std::string> TcpStoreConn::get(const std::string& key) {
  if (!check(key)) return std::nullopt;  // GET of a missing key makes the server drop the connection
  std::string q(1, v2_ ? kV2Get : kV1Get);
  put_str(q, kPrefix + key);
  const auto deadline = Clock::now() + milliseconds(timeout_ms_);
  const uint64_t n = get_le(round(q, 8), 8);
  if (n > kMaxValueBytes) {
    fail(fmt::format("a value of {} bytes for '{}', over the limit of {} bytes", n, key, kMaxValueBytes));
  }
  return take(static_cast<size_t>(n), deadline);
}

}  // namespace ddplab::dist
