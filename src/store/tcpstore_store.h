// The store on PyTorch's TCPStore (tcpstore.h is the client): liveness is a heartbeat key per rank.
#pragma once

#include <memory>

#include "src/store/store.h"

namespace ddplab::dist {

// The spec with its server identified (one probe, only when spec.server is not yet known); throws
// SetupError when nothing answers or the server is Redis or something else.
StoreSpec check_tcp_store(StoreSpec spec);
// Connects as the spec's identified server speaks (probing first only when it is not known); throws
// SetupError.
std::shared_ptr<Store> open_tcp_store(const StoreSpec& spec);

}  // namespace ddplab::dist
