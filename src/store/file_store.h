// The store on a directory that every rank sees (one host, or a shared filesystem): keys are files,
// written atomically; liveness is a lock each rank's process holds until it ends.
#pragma once

#include <memory>

#include "src/store/store.h"

namespace ddplab::dist {

// The directory exists and is writable, or SetupError naming it.
void check_file_store(const StoreSpec& spec);
// Throws SetupError.
std::shared_ptr<Store> open_file_store(const StoreSpec& spec);

}  // namespace ddplab::dist
