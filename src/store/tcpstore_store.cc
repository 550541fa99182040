// The Store on PyTorch's TCPStore (tcpstore.h has the wire protocol), and its liveness: a heartbeat.
#include "src/store/tcpstore_store.h"

#include <condition_variable>
#include <map>
#include <mutex>
#include <thread>

#include <fmt/format.h>

#include "src/store/deadline.h"
#include "src/store/tcpstore.h"

namespace ddplab::dist {

using std::chrono::milliseconds;

namespace {

// Liveness. A TCPStore shows clients nothing about other connections (no CLIENT LIST, no locks), so each
// rank proves it lives with a heartbeat: a thread of its own, on a connection of its own, counts up
// "<scope>/beat_<rank>" every kBeat. A peer whose count has not moved for kGone is gone; one whose count
// moves is alive (perhaps hung in its main thread: "alive but silent"). A count never seen, or seen for
// less than kGone without moving, is unknown. Counts, not clock times: hosts' clocks need not agree. A process whose
// heartbeat connection fails stops beating and will be seen as gone: the store it needs is then unusable anyway. The
// cost: one small SET per rank every kBeat, on the success path too (the price of knowing "gone" from "hung").
constexpr milliseconds kBeat{100}, kGone{700};

class TcpStore : public Store {
 public:
  explicit TcpStore(const StoreSpec& spec) : spec_(spec) {
    conn_ = TcpStoreConn::open(spec.host, spec.port, spec.server, kStoreIoMs);
    describe = tcpstore_where(spec.host, spec.port);
  }
  ~TcpStore() override { stop_beat(); }

  void put(const std::string& key, const std::string& value) override { conn_->set(key, value); }
  std::optional<std::string> fetch(const std::string& key) override { return conn_->get(key); }
  bool exists(const std::string& key) override { return conn_->check(key); }

  void hold_alive(const std::string& scope, int rank) override {
    stop_beat();
    std::unique_ptr<TcpStoreConn> c;
    try {
      c = TcpStoreConn::open(spec_.host, spec_.port, spec_.server, kStoreIoMs);
    } catch (const SetupError&) {
      return;  // liveness unknown: peers wait for this rank's report instead
    }
    stop_ = false;
    beat_ = std::thread([this, c = std::move(c), key = fmt::format("{}/beat_{}", scope, rank)] {
      for (uint64_t n = 0;; ++n) {
        try {
          c->set(key, std::to_string(n));
        } catch (const SetupError&) {
          return;
        }
        std::unique_lock<std::mutex> lock(mu_);
        if (cv_.wait_for(lock, kBeat, [this] { return stop_; })) return;
      }
    });
  }

  std::vector<Life> lives(const std::string& scope, int world_size) override {
    std::vector<Life> out(static_cast<size_t>(world_size), Life::unknown);
    const auto now = Clock::now();
    for (int r = 0; r < world_size; ++r) {
      const auto v = fetch(fmt::format("{}/beat_{}", scope, r));
      if (!v) continue;
      auto& [last, since, moved] = seen_[{scope, r}];
      if (since == Clock::time_point{} || *v != last) {
        moved = since != Clock::time_point{};
        last = *v;
        since = now;
      }
      if (moved) out[static_cast<size_t>(r)] = Life::alive;
      if (now - since >= kGone) out[static_cast<size_t>(r)] = Life::gone;
    }
    return out;
  }

 private:
  void stop_beat() {
    {
      std::lock_guard<std::mutex> lock(mu_);
      stop_ = true;
    }
    cv_.notify_all();
    if (beat_.joinable()) beat_.join();
  }

  StoreSpec spec_;  // its server identified
  std::unique_ptr<TcpStoreConn> conn_;
  std::thread beat_;
  std::mutex mu_;
  std::condition_variable cv_;
  bool stop_ = false;
  struct Seen {
    std::string last;
    Clock::time_point since{};
    bool moved = false;
  };
  std::map<std::pair<std::string, int>, Seen> seen_;
};

}  // namespace

StoreSpec check_tcp_store(StoreSpec spec) {
  if (spec.server == StoreServer::unknown) spec.server = identify_store_server(spec.host, spec.port, kStoreIoMs);
  if (spec.server == StoreServer::redis) {
    throw SetupError(fmt::format("{}:{} is a Redis server, not PyTorch's TCPStore: give --store redis://{}:{}",
                                 spec.host, spec.port, spec.host, spec.port));
  }
  return spec;
}

std::shared_ptr<Store> open_tcp_store(const StoreSpec& spec) {
  return std::make_shared<TcpStore>(check_tcp_store(spec));
}

}  // namespace ddplab::dist
