// The factory above the stores: a parsed StoreSpec to the Store of its kind (file_store, redis_store,
// tcpstore_store), and the checks a launcher makes once before starting ranks.
#pragma once

#include <chrono>
#include <memory>
#include <string>

#include "src/store/store.h"

namespace ddplab::dist {

// Reachability only (a file store's directory, a Redis server's AUTH and PING, a TCPStore's version),
// creating nothing. Returns the spec with what was identified recorded (a TCPStore's version), so that
// whoever opens it later need not probe again; throws SetupError.
StoreSpec check_store(StoreSpec spec);

// What serves HOST:PORT (torchrun's MASTER_ADDR:MASTER_PORT): PyTorch's TCPStore or a Redis server, probed
// once within `timeout`; the spec of that kind with the server recorded. Throws SetupError.
StoreSpec identify_store(const std::string& host, int port, std::chrono::milliseconds timeout);

// Opens the store for run `run_id` (see store.h); throws UsageError (bad run id) or SetupError.
std::shared_ptr<Store> open_store(const StoreSpec& spec, const std::string& run_id);

}  // namespace ddplab::dist
