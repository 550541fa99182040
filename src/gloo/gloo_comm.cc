#include "src/gloo/gloo_comm.h"

#include <arpa/inet.h>
#include <netdb.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <optional>

#include <gloo/allgather.h>
#include <gloo/allreduce.h>
#include <gloo/barrier.h>
#include <gloo/broadcast.h>
#include <gloo/math.h>
#include <gloo/rendezvous/context.h>
#include <gloo/rendezvous/store.h>
#include <gloo/transport/tcp/address.h>
#include <gloo/transport/tcp/device.h>

#include <fmt/format.h>

#include "src/base/flags.h"
#include "src/store/deadline.h"

namespace ddplab::dist {

using std::chrono::milliseconds;

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

// A rank whose rendezvous fails leaves its line under the run's nonce, so that the peers still connecting
// stop too instead of waiting for it (Gloo waits up to 5x its timeout for a peer that never connects).
const char* const kGaveUpKey = "gloo_setup_failed";

void mark_gave_up(Store& s, const std::string& why) {
  try {
    if (!s.exists(s.key(kGaveUpKey))) s.put(s.key(kGaveUpKey), one_line(why));
  } catch (const std::exception&) {  // the store itself failing: the peers will time out instead
  }
}

// "rank 0 gave up first: <what it said>", or nothing.
std::optional<std::string> peer_gave_up(Store& s) {
  std::optional<std::string> v;
  try {
    v = s.fetch(s.key(kGaveUpKey));
  } catch (const std::exception&) {
  }
  if (!v) return std::nullopt;
  const std::string line = one_line(*v);
  const size_t colon = line.find(": ");
  if (line.rfind("rank ", 0) == 0 && colon != std::string::npos && colon < 12) {
    return line.substr(0, colon) + " gave up first: " + line.substr(colon + 2);
  }
  return "a peer gave up first: " + line;
}

// Gloo's view of the store: its keys below the run's nonce, every wait bounded by the run's deadline,
// every value it reads checked (Gloo would trust a planted address and connect to it).
class GlooView : public gloo::rendezvous::Store {
 public:
  GlooView(dist::Store& s, int rank, int world_size, int family, Clock::time_point deadline, std::string failure)
      : s_(s), rank_(rank), ws_(world_size), family_(family), deadline_(deadline), failure_(std::move(failure)) {}

  void set(const std::string& key, const std::vector<char>& data) override {
    s_.put(s_.key(key), std::string(data.begin(), data.end()));
  }
  std::vector<char> get(const std::string& key) override {
    wait({key});
    const std::optional<std::string> v = s_.fetch(s_.key(key));
    if (!v)
      throw SetupError(fmt::format("rank {}: {} rank {}'s {} vanished from {}", rank_, failure_, owner(key), what(key),
                                   s_.describe));
    check(key, *v);
    return std::vector<char>(v->begin(), v->end());
  }
  void wait(const std::vector<std::string>& keys) override { wait(keys, left(deadline_)); }
  void wait(const std::vector<std::string>& keys, const milliseconds&) override {
    for (const std::string& k : keys) {
      auto next_check = Clock::now();
      if (!poll_until(deadline_, [&] {
            if (Clock::now() >= next_check) {  // a peer that gave up: no point waiting for the others
              next_check = Clock::now() + milliseconds(100);
              if (const auto why = peer_gave_up(s_)) {
                throw SetupError(fmt::format("rank {}: {} {}", rank_, failure_, *why));
              }
            }
            return s_.exists(s_.key(k));
          })) {
        throw SetupError(fmt::format("rank {}: {} rank {} never published its {}", rank_, failure_, owner(k), what(k)));
      }
    }
  }

 private:
  // Gloo's keys: "rank_<r>" (host name) and "<r>" (the addresses of rank r's pairs, one per other rank).
  static bool is_address_key(const std::string& k) {
    return !k.empty() && k.find_first_not_of("0123456789") == std::string::npos;
  }
  static std::string owner(const std::string& k) { return is_address_key(k) ? k : k.substr(k.find('_') + 1); }
  static const char* what(const std::string& k) { return is_address_key(k) ? "address" : "host name"; }

  void check(const std::string& key, const std::string& v) const {
    const std::string trailer = "the store must hold only this run's keys";
    if (!is_address_key(key)) {
      const bool ok =
          !v.empty() && v.size() <= 255 && std::all_of(v.begin(), v.end(), [](char c) { return c > ' ' && c < 127; });
      if (!ok) {
        throw SetupError(
            fmt::format("rank {}: rank {}'s host name in the store is not a host name ({} bytes, at "
                        "most 255 printable): {}",
                        rank_, owner(key), v.size(), trailer));
      }
      return;
    }
    const size_t one = gloo::transport::tcp::Address().bytes().size();
    const size_t want = one * static_cast<size_t>(ws_ - 1);
    if (v.size() != want) {
      throw SetupError(
          fmt::format("rank {}: rank {}'s address in the store is not a Gloo address ({} bytes, "
                      "expected {} = {} x {}): {}",
                      rank_, owner(key), v.size(), want, ws_ - 1, one, trailer));
    }
    for (size_t i = 0; i < static_cast<size_t>(ws_ - 1); ++i) {
      // Each entry: a sockaddr_storage (this Gloo listens once per pair), then a sequence number, which
      // this Gloo leaves unset (-1) in the addresses it publishes.
      sockaddr_storage ss{};
      std::memcpy(&ss, v.data() + i * one, sizeof ss);
      gloo::transport::tcp::sequence_number_t seq = 0;
      std::memcpy(&seq, v.data() + i * one + sizeof ss, sizeof seq);
      uint16_t port = 0;
      if (ss.ss_family == AF_INET) port = reinterpret_cast<const sockaddr_in*>(&ss)->sin_port;
      if (ss.ss_family == AF_INET6) port = reinterpret_cast<const sockaddr_in6*>(&ss)->sin6_port;
      if (port == 0) {
        throw SetupError(
            fmt::format("rank {}: rank {}'s address in the store is not a Gloo address (entry {}: "
                        "family {}, port 0; expected an IPv4 or IPv6 address with a port): {}",
                        rank_, owner(key), i, ss.ss_family, trailer));
      }
      // Gloo would try to connect to anything else, for as long as it likes, or fail in its own thread.
      std::string why;
      if (ss.ss_family != family_) {
        why = fmt::format("family {}, but this rank listens on IPv{}", ss.ss_family, family_ == AF_INET6 ? 6 : 4);
      } else if (seq != gloo::transport::tcp::Address::kSequenceNumberUnset) {
        why = fmt::format("sequence number {}, expected {}", seq, gloo::transport::tcp::Address::kSequenceNumberUnset);
      } else if (!unicast(ss)) {
        why = "not a unicast host address (unspecified, broadcast or multicast)";
      }
      if (!why.empty()) {
        throw SetupError(fmt::format("rank {}: rank {}'s address in the store is not a Gloo address (entry {}: {}): {}",
                                     rank_, owner(key), i, why, trailer));
      }
    }
  }

  static bool unicast(const sockaddr_storage& ss) {
    if (ss.ss_family == AF_INET) {
      const uint32_t a = ntohl(reinterpret_cast<const sockaddr_in*>(&ss)->sin_addr.s_addr);
      return a != INADDR_ANY && a != INADDR_BROADCAST && !IN_MULTICAST(a);
    }
    const in6_addr& a = reinterpret_cast<const sockaddr_in6*>(&ss)->sin6_addr;
    return !IN6_IS_ADDR_UNSPECIFIED(&a) && !IN6_IS_ADDR_MULTICAST(&a);
  }

  dist::Store& s_;
  int rank_, ws_, family_;  // family_: this rank's own (AF_INET or AF_INET6), which every peer must share
  Clock::time_point deadline_;
  std::string failure_;
};

}  // namespace

std::string resolve_bind(const std::string& address) {
  if (address.empty() || address.size() > 253) {
    throw UsageError(fmt::format("--bind must be a host name or address of this machine, 1 to 253 characters (got {})",
                                 address.size()));
  }
  addrinfo hints{}, *res = nullptr;
  hints.ai_socktype = SOCK_STREAM;
  if (int rc = getaddrinfo(address.c_str(), nullptr, &hints, &res); rc != 0 || !res) {
    throw UsageError(
        fmt::format("--bind '{}' does not resolve: {}", address, rc != 0 ? gai_strerror(rc) : "no address"));
  }
  std::string numeric, why = "no usable address";
  for (addrinfo* a = res; a && numeric.empty(); a = a->ai_next) {
    char host[NI_MAXHOST];
    if (getnameinfo(a->ai_addr, a->ai_addrlen, host, sizeof host, nullptr, 0, NI_NUMERICHOST) != 0) continue;
    const int fd = socket(a->ai_family, a->ai_socktype | SOCK_CLOEXEC, a->ai_protocol);
    if (fd < 0) {
      why = fmt::format("{}: {}", host, std::strerror(errno));
      continue;
    }
    if (bind(fd, a->ai_addr, a->ai_addrlen) == 0) {
      numeric = host;
    } else {
      why = fmt::format("{}: {}", host, std::strerror(errno));
    }
    close(fd);
  }
  freeaddrinfo(res);
  if (numeric.empty()) {
    throw UsageError(fmt::format("--bind '{}' is not an address of this machine (cannot listen on {})", address, why));
  }
  return numeric;
}

std::string gloo_protocol_broken(const std::string& what, int rank, int world_size) {
  const std::string tag = "[enforce fail at ./gloo/transport/tcp/";
  if (what.rfind(tag, 0) != 0) return "";
  const size_t close = what.find("] ");
  if (close == std::string::npos) return "";
  const std::string where = what.substr(tag.size(), close - tag.size());  // "pair.cc:488"
  std::string check = what.substr(close + 2, 120);
  if (const size_t nl = check.find('\n'); nl != std::string::npos) check.resize(nl);
  while (!check.empty() && (check.back() == ' ' || check.back() == '.')) check.pop_back();
  // The checks a peer's bytes can fail (pair.cc's prepareRead): what the message named that this rank lacks.
  const std::string expected =
      check.find("localPendingRecv_") != std::string::npos
          ? "it sent data for a receive this rank never posted"
      : check.find("nbytes") != std::string::npos || check.find("size_") != std::string::npos
          ? "it sent more data than the receive it named can hold"
          : "it sent a message this rank cannot take";
  const std::string who = world_size == 2 ? fmt::format("rank {}'s connection", 1 - rank)
                                          : fmt::format("the connection of one of its {} peers (Gloo does not "
                                                        "say which)",
                                                        world_size - 1);
  return fmt::format(
      "rank {}: {} broke the Gloo protocol ({}): the peer is not a ddplab rank of this run, or the "
      "connection was corrupted (gloo: {} {})",
      rank, who, expected, where, check);
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
  // float16 as ProcessGroupGloo all-reduces a CPU Half tensor: gloo::float16 elements (the ring's segments
  // are cut for 2-byte elements) and gloo::sum<gloo::float16>, which rounds to float16 at every addition.
  void all_reduce(Half* data, size_t n, comm::ReduceOp op) override {
    static_assert(sizeof(gloo::float16) == sizeof(Half), "float16 is two bytes in both");
    if (op == comm::ReduceOp::avg) throw comm::CommError("Gloo has no AVG reduction: pre-divide and SUM");
    run("all_reduce", [&](uint32_t tag) {
      gloo::AllreduceOptions opts(ctx_);
      opts.setOutput(reinterpret_cast<gloo::float16*>(data), n);
      opts.setReduceFunction(static_cast<void (*)(void*, const void*, const void*, size_t)>(&gloo::sum<gloo::float16>));
      opts.setAlgorithm(gloo::AllreduceOptions::Algorithm::RING);
      opts.setTag(tag);
      opts.setTimeout(timeout);
      gloo::allreduce(opts);
    });
  }
  // torch 1.13's ProcessGroupGloo has no bfloat16 case: dist.all_reduce of a bfloat16 tensor raises
  // "RuntimeError: Invalid scalar type" (tests/golden/half/gloo_fp16.json records it). Refused alike, before
  // any rank sends anything.
  void all_reduce(BFloat16*, size_t, comm::ReduceOp) override {
    throw comm::CommError(fmt::format(
        "rank {}: bfloat16 all_reduce refused: Invalid scalar type (torch 1.13's ProcessGroupGloo has no bfloat16)",
        ctx_->rank));
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
    // Gloo's allgather divides by the element count: gathering nothing is nothing to do (every rank gives the
    // same size, so every rank skips it alike).
    if (bytes == 0) return;
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
    if (!broken_.empty()) {
      throw comm::CommError(fmt::format("rank {}: {} refused: the connections were closed after {} failed",
                                        ctx_->rank, comm::collective_label(name, seq, context), broken_));
    }
    const auto start = Clock::now();
    try {
      f(static_cast<uint32_t>(seq));
    } catch (const std::exception& e) {
      const auto took = std::chrono::duration_cast<milliseconds>(Clock::now() - start);
      const std::string why = gloo_message(e);
      broken_ = fmt::format("{} #{}", name, seq);
      // Close every connection first: a peer blocked on this rank fails now and reports too, instead of
      // waiting out its own timeout while this rank waits for its report.
      try {
        ctx_->closeConnections();
      } catch (const std::exception&) {
      }
      const std::string peers = name_silent_peers(*store_, ctx_->rank, ctx_->size, broken_, blame_window(timeout));
      // A timeout is "after at most the timeout"; anything else (a peer's connection closed) came when it
      // came, and the line says when.
      const std::string when =
          took >= timeout || why.rfind("Timed out", 0) == 0
              ? fmt::format("after at most {} ms", timeout.count())
              : fmt::format("after {} ms, before its {} ms timeout", took.count(), timeout.count());
      throw comm::CommError(fmt::format("rank {}: {} failed {}: {} (gloo: {})", ctx_->rank,
                                        comm::collective_label(name, seq, context), when, peers, why));
    }
  }

  std::shared_ptr<Store> store_;
  std::shared_ptr<gloo::rendezvous::Context> ctx_;
  uint64_t seq_ = 0;
  std::string broken_;
};

}  // namespace

std::unique_ptr<comm::Communicator> connect_gloo(std::shared_ptr<Store> store, int rank, int world_size,
                                                 const std::string& bind_address, milliseconds timeout) {
  const auto deadline = Clock::now() + timeout;
  const std::string failure = fmt::format("rendezvous of {} ranks failed within {} ms:", world_size, timeout.count());
  gloo::transport::tcp::attr attr;
  attr.hostname = resolve_bind(bind_address);  // Gloo itself crashes on a name that does not resolve
  std::shared_ptr<gloo::transport::Device> device;
  try {
    device = gloo::transport::tcp::CreateDevice(attr);
  } catch (const std::exception& e) {
    throw SetupError(fmt::format("cannot open a TCP device on '{}': {}", bind_address, gloo_message(e)));
  }
  join_run(*store, rank, world_size, deadline, failure);
  auto ctx = std::make_shared<gloo::rendezvous::Context>(rank, world_size);
  // Gloo waits 5x the context's timeout for a pair's first connection (tcp/pair.h, "a longer timeout when
  // waiting for initial connect"): rank 2 of 3 waited 15 s at --timeout 3 for a rank 0 that had already
  // exited. A fifth of what is left ends that wait by the run's deadline; collectives pass their own timeout.
  ctx->setTimeout(std::max(left(deadline) / 5, milliseconds(20)));
  GlooView view(*store, rank, world_size, attr.hostname.find(':') != std::string::npos ? AF_INET6 : AF_INET, deadline,
                failure);
  try {
    ctx->connectFullMesh(view, device);
  } catch (const SetupError& e) {
    mark_gave_up(*store, e.what());
    throw;
  } catch (const std::exception& e) {
    // Gloo's own failure (a connect timeout) often follows from a peer that gave up: say what it found.
    const auto first = peer_gave_up(*store);
    const std::string line = first ? fmt::format("rank {}: {} {} (gloo: {})", rank, failure, *first, gloo_message(e))
                                   : fmt::format("rank {}: {} {}", rank, failure, gloo_message(e));
    mark_gave_up(*store, line);
    throw SetupError(line);
  }
  ctx->setTimeout(timeout);  // the default of anything that does not pass its own
  auto c = std::make_unique<GlooComm>(std::move(store), std::move(ctx));
  c->timeout = timeout;
  return c;
}

}  // namespace ddplab::dist
