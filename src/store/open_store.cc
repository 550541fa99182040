// The factory above the stores (open_store.h): one switch over the spec's kind, nothing falls through.
#include "src/store/open_store.h"

#include <algorithm>

#include "src/store/file_store.h"
#include "src/store/redis_store.h"
#include "src/store/tcpstore.h"
#include "src/store/tcpstore_store.h"

namespace ddplab::dist {

StoreSpec check_store(StoreSpec spec) {
  switch (spec.kind) {
    case StoreKind::file:
      check_file_store(spec);
      return spec;
    case StoreKind::redis:
      check_redis_store(spec);
      return spec;
    case StoreKind::tcpstore:
      return check_tcp_store(std::move(spec));
  }
  throw SetupError("unknown store kind");
}

StoreSpec identify_store(const std::string& host, int port, std::chrono::milliseconds timeout) {
  StoreSpec spec;
  spec.host = host;
  spec.port = port;
  spec.server = identify_store_server(host, port, static_cast<int>(std::min<int64_t>(timeout.count(), kStoreIoMs)));
  spec.kind = spec.server == StoreServer::redis ? StoreKind::redis : StoreKind::tcpstore;
  return spec;
}

std::shared_ptr<Store> open_store(const StoreSpec& spec, const std::string& run_id) {
  check_run_id(run_id);
  std::shared_ptr<Store> s;
  switch (spec.kind) {
    case StoreKind::file:
      s = open_file_store(spec);
      break;
    case StoreKind::redis:
      s = open_redis_store(spec);
      break;
    case StoreKind::tcpstore:
      s = open_tcp_store(spec);
      break;
  }
  if (!s) throw SetupError("unknown store kind");
  s->run_id = s->scope = run_id;
  s->enter(run_id);  // a file store: DIR/<run-id>
  return s;
}

}  // namespace ddplab::dist
