// A minimal Redis client (RESP2 over TCP) whose every wait has a deadline: hiredis, inside Gloo's
// RedisStore, blocks forever on a server that never answers and knows no AUTH.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include "src/store/deadline.h"
#include "src/store/store.h"

namespace ddplab::dist {

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
  ~RedisConn();
  // "" or why not.
  std::string connect_to(const std::string& host, int port, int timeout_ms);

  // One command, its arguments as RESP bulk strings. Throws RedisIoError when the connection fails, the
  // reply does not come within `timeout_ms`, is not RESP, or carries a bulk string over `max_bulk` bytes.
  Reply command(const std::vector<std::string>& args, int timeout_ms = kStoreIoMs, size_t max_bulk = kMaxValueBytes);

 private:
  static bool wait_fd(int fd, short events, Clock::time_point deadline);
  [[noreturn]] void fail(const std::string& why);
  int64_t parse_number(const std::string& s);
  void fill(Clock::time_point deadline, int timeout_ms);
  std::string read_line(Clock::time_point deadline, int timeout_ms);
  std::string read_exact(size_t n, Clock::time_point deadline, int timeout_ms);

  int fd_ = -1;
  std::string buf_;
};

// "the Redis store at HOST:PORT"
std::string redis_where(const StoreSpec& s);

// Connects, sends AUTH when a password is known, then PING; every failure is one line naming the cause.
std::unique_ptr<RedisConn> redis_open(const StoreSpec& s, int timeout_ms = kStoreIoMs);

}  // namespace ddplab::dist
