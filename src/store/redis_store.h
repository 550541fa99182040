// The store on a Redis server (redis.h is the client): keys expire after a week; liveness is a named
// connection each rank's process holds until it ends.
#pragma once

#include <memory>

#include "src/store/store.h"

namespace ddplab::dist {

// AUTH (the password from the spec, or DDPLAB_REDIS_PASSWORD) and PING; throws SetupError.
void check_redis_store(const StoreSpec& spec);
// Throws SetupError.
std::shared_ptr<Store> open_redis_store(const StoreSpec& spec);

}  // namespace ddplab::dist
