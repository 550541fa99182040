// The store ranks meet through: a directory (one host), a Redis server or PyTorch's TCPStore (several hosts;
// the TCPStore is torchrun's, which ddplab's ranks use as clients: tcpstore.h). Gloo's rendezvous
// and NCCL's unique id travel through it, and a failed rank names its silent peers with it.
//
// The store must be trusted (whoever can write to it can point ranks at other peers), but nothing read
// from it is used unchecked, and runs never meet another run's keys:
//  - keys live under the run id (--run-id): DIR/<run-id>/... for a file store, "<run-id>/..." in Redis;
//  - inside it, under a fresh random nonce per run: rank 0 writes "<run-id>/nonce", every other rank
//    joins under that nonce with a random token of its own and waits until rank 0 echoes the token back.
//    Keys left by an earlier run with the same id (a stale nonce, stale addresses) are never used: a rank
//    that read a stale nonce sees its token missing from the echo and waits for rank 0's fresh one;
//  - values are checked before use (sizes, Gloo addresses, host names, tokens), one clear line if not.
#pragma once

#include <chrono>
#include <cstddef>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "src/base/errors.h"

namespace ddplab::dist {

// Rendezvous and connection failures: reported as one line, exit status 2.
struct SetupError : UsageError {
  using UsageError::UsageError;
};

constexpr size_t kMaxValueBytes = 1 << 20;  // the largest value a store may hand us (addresses: 8.5 KiB)
constexpr int kStoreIoMs = 5000;            // one round trip, connecting, AUTH, PING, a probe

// A server's text in one line, at most 200 characters.
std::string one_line(std::string s);

enum class StoreKind { file, redis, tcpstore };
// What answers at a HOST:PORT, once identified (tcpstore.h probes it); unknown until then.
enum class StoreServer { unknown, tcpstore_v1, tcpstore_v2, redis };

// Where ranks meet, parsed once: "file:DIR" (an existing, writable directory),
// "redis://[[USER]:PASSWORD@]HOST[:PORT]" (the password may also come from DDPLAB_REDIS_PASSWORD) or
// "tcp://HOST:PORT" (PyTorch's TCPStore, served by someone else).
struct StoreSpec {
  StoreKind kind = StoreKind::file;
  std::string path, host;
  int port = 0;
  std::string user, password;                 // Redis AUTH; never printed
  StoreServer server = StoreServer::unknown;  // recorded once probed, so that nobody probes it again
};
// Throws UsageError with one clear line when the text is malformed (the password is not echoed).
StoreSpec parse_store(const std::string& text);
// "tcpstore-1.x" | "tcpstore-2.x" | "redis" | "unknown", and back (nullopt for any other text).
const char* store_server_name(StoreServer s);
std::optional<StoreServer> parse_store_server(const std::string& name);
// --run-id: 1-64 characters of A-Z a-z 0-9 . _ - (it names a directory); throws UsageError.
void check_run_id(const std::string& run_id);

enum class Life { alive, gone, unknown };

// A key-value store the backends share (Gloo's rendezvous store; NCCL's unique id travels through it):
// whole keys ("<run-id>/<nonce>/<key>"), values checked for size, and each rank's liveness (a lock or a
// connection that its process holds until it ends: observing it costs nothing on the success path).
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

  std::string describe;  // "the file store /tmp/x" | "the Redis store at h:p"
  std::string run_id;    // --run-id
  std::string scope;     // run_id, then run_id/nonce once joined
  bool joined = false;
};

// open_store.h opens one for a run: open_store(spec, run_id).
// The run's handshake (fresh nonce from rank 0, tokens echoed back); connect_gloo and connect_nccl call it
// (once per store). On failure throws SetupError "rank R: <failure> rank 1 never joined run ...", where
// <failure> is e.g. "rendezvous of 4 ranks failed within 30000 ms:".
void join_run(Store& s, int rank, int world_size, std::chrono::milliseconds timeout, const std::string& failure);
// The same, by a deadline (connect_gloo's one deadline covers joining and connecting).
void join_run(Store& s, int rank, int world_size, std::chrono::steady_clock::time_point deadline,
              const std::string& failure);
// Keys below the run's namespace (after join_run: below its nonce).
void store_set(Store& s, const std::string& key, const std::string& value);
std::string store_get(Store& s, const std::string& key, std::chrono::milliseconds timeout);  // throws SetupError

// After a collective failed (`what`, e.g. "all_reduce #7"): leave this rank's failure mark (one key per
// rank, whatever the collective) and wait until every peer has either left its own mark or is gone
// (its process exited: the store sees its liveness lock or connection released), at most `window`.
// Peers still alive and silent then are named as hanging. Nothing is written on the success path.
// Returns e.g. "rank 2 exited or hangs: its process is gone", or "every peer reports the same failure".
std::string name_silent_peers(Store& store, int rank, int world_size, const std::string& what,
                              std::chrono::milliseconds window);
// How long a failed rank waits for alive peers to report: the timeout, at least 0.2 s, at most 1.5 s.
std::chrono::milliseconds blame_window(std::chrono::milliseconds timeout);

}  // namespace ddplab::dist
