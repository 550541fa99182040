// A client of PyTorch's TCPStore (torch.distributed.TCPStore), the store torchrun's agent hosts at
// MASTER_ADDR:MASTER_PORT: ranks are clients only, whichever process serves it. Written from a reading of
// PyTorch's sources (torch/csrc/distributed/c10d/TCPStore.cpp, TCPStoreBackend.cpp,
// TCPStoreLibUvBackend.cpp; v1.13.0's TCPStore.cpp), not from its code. Every wait has a deadline.
//
// The wire format, both versions: a query is one type byte and its arguments; strings and values are a
// uint64 length and the bytes, counts a uint64, all little-endian. Replies: GET a string, CHECK one byte
// (0 ready, 1 not ready), PING the 4-byte nonce. SET has no reply.
//  - 1.x (Debian's 1.13 here): SET 0, GET 2, CHECK 4; no handshake.
//  - 2.x: VALIDATE 0 (+ uint32 magic 0x3C85F7CE, no reply) must come first on a connection; then SET 1,
//    GET 3, CHECK 5, and in later 2.x PING 13. The classic server drops a connection whose first query is
//    not VALIDATE; the libuv server (the default from 2.4) ignores that query. The store's own
//    connections send VALIDATE and a CHECK of no keys (answered by every 2.x; PING only by later ones).
// Which one answers is found by probing (tcpstore.cc): probes are built so that neither version, nor a
// Redis server, ever waits for bytes that do not come (a 1.x server reads queries with blocking receives).
// Keys get PyTorch's client prefix "/", so torch's TCPStore.get("k") sees this client's key "k".
#pragma once

#include <memory>
#include <optional>
#include <string>

#include "src/store/deadline.h"
#include "src/store/store.h"

namespace ddplab::dist {

// Connects and identifies the server (StoreServer, store.h) within `timeout_ms` per step; throws SetupError (one line
// naming the address and the cause) when nothing listens, nothing answers, or the answer is neither TCPStore nor Redis.
StoreServer identify_store_server(const std::string& host, int port, int timeout_ms);

// "the TCPStore at HOST:PORT"
std::string tcpstore_where(const std::string& host, int port);

// One connection, for tests and for the store: set, check, get of raw keys (the "/" prefix included).
class TcpStoreConn {
 public:
  ~TcpStoreConn();
  // Connects to a server already identified as `server` (a TCPStore), handshaking as its version needs.
  static std::unique_ptr<TcpStoreConn> open(const std::string& host, int port, StoreServer server, int timeout_ms);
  void set(const std::string& key, const std::string& value);
  bool check(const std::string& key);
  std::optional<std::string> get(const std::string& key);  // CHECK, then GET when present

 private:
  std::string round(const std::string& query, size_t reply_bytes);  // sends, reads exactly reply_bytes
  std::string take(size_t n, Clock::time_point deadline);           // the next n bytes
  [[noreturn]] void fail(const std::string& why);                   // closes, throws SetupError
  std::string where_, buf_;
  int fd_ = -1, timeout_ms_ = 0;
  bool v2_ = false;
};

}  // namespace ddplab::dist
