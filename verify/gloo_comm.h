// The Gloo backend (Debian's libgloo, 2022 API): TCP transport, rendezvous through a FileStore directory
// (one host) or a Redis server (several hosts). Collectives are Gloo's own: all_reduce is its ring.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>

#include "src/comm/communicator.h"
#include "src/flags.h"

namespace ddplab::verify {

// Where ranks meet: "file:DIR" (an existing, writable directory, fresh for every run) or
// "redis://HOST:PORT". `prefix` keeps runs sharing one Redis server apart.
struct StoreSpec {
  std::string kind;  // "file" | "redis"
  std::string path, host;
  int port = 0;
};
// Throws UsageError with one clear line when the text is malformed.
StoreSpec parse_store(const std::string& text);

// A key-value store the backends share (Gloo's rendezvous store; NCCL's unique id travels through it).
class Store;
std::shared_ptr<Store> open_store(const StoreSpec& spec, const std::string& prefix);  // throws SetupError
void store_set(Store& s, const std::string& key, const std::string& value);
std::string store_get(Store& s, const std::string& key, std::chrono::milliseconds timeout);  // throws on timeout

// After collective #seq failed: leave a mark in the store and look for the peers' marks for up to a
// second. A peer that leaves none has exited or hangs: "rank 2 exited or hangs" (or "every peer reports
// the same failure"). Marks only on failure: a mark per collective would cost a store write each time.
std::string name_silent_peers(Store& store, uint64_t seq, int rank, int world_size);

// Rendezvous and connection failures: reported as one line, exit status 2.
struct SetupError : UsageError {
  using UsageError::UsageError;
};

std::unique_ptr<comm::Communicator> connect_gloo(std::shared_ptr<Store> store, int rank, int world_size,
                                                 const std::string& bind_address,
                                                 std::chrono::milliseconds timeout);

}  // namespace ddplab::verify
