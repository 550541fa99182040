#include "verify/gloo_comm.h"

#include <netdb.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstring>

#include <gloo/allgather.h>
#include <gloo/allreduce.h>
#include <gloo/barrier.h>
#include <gloo/broadcast.h>
#include <gloo/math.h>
#include <gloo/rendezvous/context.h>
#include <gloo/rendezvous/file_store.h>
#include <gloo/rendezvous/prefix_store.h>
#include <gloo/rendezvous/redis_store.h>
#include <gloo/transport/tcp/device.h>

#include <fmt/format.h>

#include "src/flags.h"

namespace ddplab::verify {
namespace {

// Gloo's exception texts start with "[./gloo/file.cc:27] " and may run over lines: keep the message.
std::string gloo_message(const std::exception& e) {
  std::string what = e.what();
  if (const size_t nl = what.find('\n'); nl != std::string::npos) what.resize(nl);
  if (!what.empty() && what[0] == '[') {
    if (const size_t close = what.find("] "); close != std::string::npos) what = what.substr(close + 2);
  }
  return what.substr(0, 200);
}

// hiredis (inside Gloo's RedisStore) blocks forever on a server that never answers. Ask first, with a
// deadline: connect, send PING, expect "+PONG". Returns "" or why not.
std::string redis_ping(const std::string& host, int port, int timeout_ms) {
  addrinfo hints{}, *res = nullptr;
  hints.ai_socktype = SOCK_STREAM;
  if (int rc = getaddrinfo(host.c_str(), std::to_string(port).c_str(), &hints, &res); rc != 0) {
    return fmt::format("cannot resolve '{}': {}", host, gai_strerror(rc));
  }
  std::string why = "no address";
  for (addrinfo* a = res; a; a = a->ai_next) {
    const int fd = socket(a->ai_family, a->ai_socktype | SOCK_NONBLOCK, a->ai_protocol);
    if (fd < 0) continue;
    const auto wait_for = [&](short events) {
      pollfd p{fd, events, 0};
      return poll(&p, 1, timeout_ms) == 1 && (p.revents & events) != 0;
    };
    if (connect(fd, a->ai_addr, a->ai_addrlen) != 0 && errno != EINPROGRESS) {
      why = std::strerror(errno);
    } else if (!wait_for(POLLOUT)) {
      why = "connection timed out";
    } else {
      int err = 0;
      socklen_t len = sizeof err;
      getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &len);
      if (err != 0) {
        why = std::strerror(err);
      } else if (send(fd, "PING\r\n", 6, MSG_NOSIGNAL) != 6) {
        why = "cannot send PING";
      } else {
        char buf[16] = {0};
        const ssize_t n = wait_for(POLLIN) ? recv(fd, buf, sizeof buf - 1, 0) : -1;
        why = n >= 5 && std::strncmp(buf, "+PONG", 5) == 0
                  ? ""
                  : fmt::format("the port is in use by something that is not Redis (no PONG within {} ms)", timeout_ms);
      }
    }
    close(fd);
    if (why.empty()) break;
  }
  freeaddrinfo(res);
  return why;
}

}  // namespace

class Store {
 public:
  std::unique_ptr<gloo::rendezvous::Store> base;
  std::unique_ptr<gloo::rendezvous::PrefixStore> prefixed;
  gloo::rendezvous::Store& get() { return prefixed ? static_cast<gloo::rendezvous::Store&>(*prefixed) : *base; }
};

StoreSpec parse_store(const std::string& text) {
  StoreSpec s;
  if (text.rfind("file:", 0) == 0) {
    s.kind = "file";
    s.path = text.substr(5);
    if (s.path.empty()) throw UsageError("--store file:DIR needs a directory");
    return s;
  }
  if (text.rfind("redis://", 0) == 0) {
    s.kind = "redis";
    const std::string rest = text.substr(8);
    const size_t colon = rest.rfind(':');
    s.host = rest.substr(0, colon);
    const std::string port = colon == std::string::npos ? "6379" : rest.substr(colon + 1);
    const int64_t p = parse_int("--store port", port);
    if (s.host.empty() || p < 1 || p > 65535) {
      throw UsageError(fmt::format("--store must be redis://HOST:PORT with a port in [1, 65535] (got '{}')", text));
    }
    s.port = static_cast<int>(p);
    return s;
  }
  throw UsageError(fmt::format("--store must be file:DIR or redis://HOST:PORT (got '{}')", text));
}

std::shared_ptr<Store> open_store(const StoreSpec& spec, const std::string& prefix) {
  auto s = std::make_shared<Store>();
  if (spec.kind == "file") {
    struct stat st{};
    if (stat(spec.path.c_str(), &st) != 0 || !S_ISDIR(st.st_mode)) {
      throw SetupError(fmt::format("store directory '{}' does not exist", spec.path));
    }
    if (access(spec.path.c_str(), W_OK) != 0) {
      throw SetupError(fmt::format("store directory '{}' is not writable", spec.path));
    }
    s->base = std::make_unique<gloo::rendezvous::FileStore>(spec.path);  // a fresh directory per run: no prefix
    return s;
  }
  if (std::string why = redis_ping(spec.host, spec.port, 5000); !why.empty()) {
    throw SetupError(fmt::format("cannot reach the Redis store at {}:{}: {}", spec.host, spec.port, why));
  }
  try {
    s->base = std::make_unique<gloo::rendezvous::RedisStore>(spec.host, spec.port);
  } catch (const std::exception& e) {
    throw SetupError(fmt::format("cannot reach the Redis store at {}:{}: {}", spec.host, spec.port, gloo_message(e)));
  }
  s->prefixed = std::make_unique<gloo::rendezvous::PrefixStore>(prefix, *s->base);
  return s;
}

void store_set(Store& s, const std::string& key, const std::string& value) {
  s.get().set(key, std::vector<char>(value.begin(), value.end()));
}

std::string store_get(Store& s, const std::string& key, std::chrono::milliseconds timeout) {
  s.get().wait({key}, timeout);
  const std::vector<char> v = s.get().get(key);
  return std::string(v.begin(), v.end());
}

std::string name_silent_peers(Store& store, uint64_t seq, int rank, int world_size) {
  std::vector<int> silent;
  try {
    store_set(store, fmt::format("failed_{}_{}", seq, rank), "1");
    const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(1);
    for (int r = 0; r < world_size; ++r) {
      if (r == rank) continue;
      const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(until - std::chrono::steady_clock::now());
      try {
        store.get().wait({fmt::format("failed_{}_{}", seq, r)}, std::max(left, std::chrono::milliseconds(1)));
      } catch (const std::exception&) {
        silent.push_back(r);
      }
    }
  } catch (const std::exception&) {  // the store itself is gone: say what we know
  }
  if (silent.empty()) return "every peer reports the same failure";
  return fmt::format("rank{} {} exited or hangs", silent.size() > 1 ? "s" : "", fmt::join(silent, ", "));
}

namespace {

class GlooComm : public comm::Communicator {
 public:
  GlooComm(std::shared_ptr<Store> store, std::shared_ptr<gloo::rendezvous::Context> ctx)
      : store_(std::move(store)), ctx_(std::move(ctx)) {}
  int rank() const override { return ctx_->rank; }
  int world_size() const override { return ctx_->size; }
  std::string backend() const override { return "gloo"; }

  void all_reduce(float* data, size_t n, comm::ReduceOp op) override {
    if (op == comm::ReduceOp::avg) throw comm::CommError("Gloo has no AVG reduction: pre-divide and SUM");
    run("all_reduce", [&](uint32_t tag) {
      gloo::AllreduceOptions opts(ctx_);
      opts.setOutput(data, n);
      opts.setReduceFunction(static_cast<void (*)(void*, const void*, const void*, size_t)>(&gloo::sum<float>));
      opts.setAlgorithm(gloo::AllreduceOptions::Algorithm::RING);  // what ProcessGroupGloo ends up using
      opts.setTag(tag);
      opts.setTimeout(timeout);
      gloo::allreduce(opts);
    });
  }
  void broadcast(float* data, size_t n, int root) override {
    run("broadcast", [&](uint32_t tag) {
      gloo::BroadcastOptions opts(ctx_);
      opts.setOutput(data, n);
      opts.setRoot(root);
      opts.setTag(tag);
      opts.setTimeout(timeout);
      gloo::broadcast(opts);
    });
  }
  void all_gather(const void* in, size_t bytes, void* out) override {
    run("all_gather", [&](uint32_t tag) {
      gloo::AllgatherOptions opts(ctx_);
      opts.setInput(const_cast<char*>(static_cast<const char*>(in)), bytes);
      opts.setOutput(static_cast<char*>(out), bytes * static_cast<size_t>(ctx_->size));
      opts.setTag(tag);
      opts.setTimeout(timeout);
      gloo::allgather(opts);
    });
  }
  void barrier() override {
    run("barrier", [&](uint32_t tag) {
      gloo::BarrierOptions opts(ctx_);
      opts.setTag(tag);
      opts.setTimeout(timeout);
      gloo::barrier(opts);
    });
  }

 private:
  template <typename F>
  void run(const char* name, F f) {
    const uint64_t seq = seq_++;
    try {
      f(static_cast<uint32_t>(seq));
    } catch (const std::exception& e) {
      throw comm::CommError(fmt::format("rank {}: {} #{} failed after at most {} ms: {} (gloo: {})", ctx_->rank, name,
                                        seq, timeout.count(),
                                        name_silent_peers(*store_, seq, ctx_->rank, ctx_->size), gloo_message(e)));
    }
  }

  std::shared_ptr<Store> store_;
  std::shared_ptr<gloo::rendezvous::Context> ctx_;
  uint64_t seq_ = 0;
};

}  // namespace

std::unique_ptr<comm::Communicator> connect_gloo(std::shared_ptr<Store> store, int rank, int world_size,
                                                 const std::string& bind_address,
                                                 std::chrono::milliseconds timeout) {
  gloo::transport::tcp::attr attr;
  attr.hostname = bind_address;
  std::shared_ptr<gloo::transport::Device> device;
  try {
    device = gloo::transport::tcp::CreateDevice(attr);
  } catch (const std::exception& e) {
    throw SetupError(fmt::format("cannot open a TCP device on '{}': {}", bind_address, e.what()));
  }
  auto ctx = std::make_shared<gloo::rendezvous::Context>(rank, world_size);
  ctx->setTimeout(timeout);
  try {
    ctx->connectFullMesh(store->get(), device);
  } catch (const std::exception& e) {
    throw SetupError(fmt::format("rank {}: rendezvous of {} ranks failed within {} ms: {}", rank, world_size,
                                 timeout.count(), gloo_message(e)));
  }
  auto c = std::make_unique<GlooComm>(std::move(store), std::move(ctx));
  c->timeout = timeout;
  return c;
}

}  // namespace ddplab::verify
