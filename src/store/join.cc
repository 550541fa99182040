// The run's handshake (join_run) and, after a failure, naming the peers that left no mark (blame).
#include <sys/random.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <set>
#include <thread>

#include <fmt/format.h>

#include "src/store/deadline.h"
#include "src/store/store.h"

namespace ddplab::dist {

using std::chrono::milliseconds;

namespace {

constexpr size_t kTokenHex = 32;  // nonces and tokens: 128 random bits, hex

std::string random_hex() {
  unsigned char bytes[kTokenHex / 2];
  size_t got = 0;
  while (got < sizeof bytes) {
    const ssize_t n = getrandom(bytes + got, sizeof bytes - got, 0);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) throw SetupError(fmt::format("getrandom: {}", std::strerror(errno)));
    got += static_cast<size_t>(n);
  }
  std::string hex;
  for (unsigned char b : bytes) hex += fmt::format("{:02x}", b);
  return hex;
}

bool is_token(const std::string& s) {
  return s.size() == kTokenHex && s.find_first_not_of("0123456789abcdef") == std::string::npos;
}

std::string rank_list(const std::vector<int>& ranks) {
  return fmt::format("rank{} {}", ranks.size() > 1 ? "s" : "", fmt::join(ranks, ", "));
}

}  // namespace

void join_run(Store& s, int rank, int ws, Clock::time_point deadline, const std::string& failure) {
  if (s.joined) return;
  const std::string base = s.run_id;
  const std::string nonce_key = base + "/nonce";
  if (rank == 0) {
    const std::string nonce = random_hex();
    const std::string scope = base + "/" + nonce;
    s.enter(scope);
    s.hold_alive(scope, 0);
    s.put(nonce_key, nonce);  // from here on, ranks that read an older nonce learn that it is stale
    std::vector<std::string> tokens(static_cast<size_t>(ws), std::string(kTokenHex, '0'));
    std::set<int> missing;
    for (int r = 1; r < ws; ++r) missing.insert(r);
    auto next_check = Clock::now();
    const bool all = poll_until(deadline, [&] {
      for (auto it = missing.begin(); it != missing.end();) {
        const auto v = s.fetch(fmt::format("{}/join_{}", scope, *it));
        if (v && !is_token(*v)) {
          throw SetupError(
              fmt::format("rank 0: rank {}'s token in {} is malformed ({} bytes): the store must hold "
                          "only this run's keys",
                          *it, s.describe, v->size()));
        }
        if (v) tokens[static_cast<size_t>(*it)] = *v;
        it = v ? missing.erase(it) : std::next(it);
      }
      if (!missing.empty() && Clock::now() >= next_check) {  // another rank 0 on this run id?
        next_check = Clock::now() + milliseconds(200);
        if (s.fetch(nonce_key) != nonce) {
          throw SetupError(
              fmt::format("rank 0: another rank 0 started run '{}' in {} at the same time: give each "
                          "run its own --run-id",
                          base, s.describe));
        }
      }
      return missing.empty();
    });
    if (!all) {
      const std::vector<int> m(missing.begin(), missing.end());
      throw SetupError(fmt::format("rank 0: {} {} never joined run '{}' (not started, exited, or cannot reach {})",
                                   failure, rank_list(m), base, s.describe));
    }
    std::string go;
    for (const std::string& t : tokens) go += t;
    s.put(scope + "/go", go);
    s.scope = scope;
  } else {
    const std::string token = random_hex();
    std::string stale, last_seen;
    for (;;) {
      // Rank 0's nonce; one whose "go" did not echo this rank's token belongs to an earlier run.
      std::optional<std::string> nonce;
      const bool found = poll_until(deadline, [&] {
        nonce = s.fetch(nonce_key);
        if (nonce) last_seen = *nonce;
        return nonce && is_token(*nonce) && *nonce != stale;
      });
      if (!found) {
        const std::string why = last_seen.empty() ? "rank 0 never opened it"
                                : !is_token(last_seen)
                                    ? "its nonce in the store is malformed and rank 0 never replaced it"
                                    : fmt::format(
                                          "rank 0 never confirmed this rank (only an earlier run's keys are there, "
                                          "or another process was started as rank {})",
                                          rank);
        throw SetupError(
            fmt::format("rank {}: {} cannot join run '{}' in {}: {}", rank, failure, base, s.describe, why));
      }
      const std::string scope = base + "/" + *nonce;
      s.enter(scope);
      s.hold_alive(scope, rank);
      s.put(fmt::format("{}/join_{}", scope, rank), token);
      std::optional<std::string> go;
      auto next_check = Clock::now() + milliseconds(100);
      bool moved = false;
      const bool answered = poll_until(deadline, [&] {
        go = s.fetch(scope + "/go");
        if (go) return true;
        if (Clock::now() >= next_check) {
          next_check = Clock::now() + milliseconds(100);
          moved = s.fetch(nonce_key) != *nonce;
        }
        return moved;
      });
      if (!answered) {
        throw SetupError(
            fmt::format("rank {}: {} rank 0 never confirmed this rank in run '{}' (rank 0 not started, "
                        "exited, or two ranks {} were started)",
                        rank, failure, base, rank));
      }
      if (moved) continue;
      const size_t at = static_cast<size_t>(rank) * kTokenHex;
      if (go->size() == static_cast<size_t>(ws) * kTokenHex && go->compare(at, kTokenHex, token) == 0) {
        s.scope = scope;
        break;
      }
      stale = *nonce;  // an earlier run's "go" (or another process with this rank): wait for a fresh nonce
    }
  }
  s.joined = true;
}

void join_run(Store& s, int rank, int world_size, milliseconds timeout, const std::string& failure) {
  join_run(s, rank, world_size, Clock::now() + timeout, failure);
}

// How long a failed rank waits for its peers' own reports before naming the silent ones. A peer that is
// gone is seen at once (its liveness lock or connection), and live survivors report within milliseconds
// (the failing rank closes its connections, so peers blocked on it fail too): a short window suffices,
// and keeps the promise that survivors exit within --timeout + 2 s even when a peer hangs.
milliseconds blame_window(milliseconds timeout) { return std::clamp(timeout, milliseconds(200), milliseconds(1500)); }

std::string name_silent_peers(Store& store, int rank, int world_size, const std::string& what, milliseconds window) {
  std::vector<int> gone, silent;
  std::vector<Life> lives;
  try {
    store.put(store.key(fmt::format("failed_{}", rank)), what);
    std::set<int> pending;
    for (int r = 0; r < world_size; ++r) {
      if (r != rank) pending.insert(r);
    }
    const auto deadline = Clock::now() + window;
    for (;;) {
      lives = store.lives(store.scope, world_size);
      for (auto it = pending.begin(); it != pending.end();) {
        if (store.exists(store.key(fmt::format("failed_{}", *it)))) {  // it reported a failure of its own
          it = pending.erase(it);
        } else if (lives[static_cast<size_t>(*it)] == Life::gone) {  // its process ended without a word
          gone.push_back(*it);
          it = pending.erase(it);
        } else {
          ++it;
        }
      }
      if (pending.empty() || Clock::now() >= deadline) break;
      std::this_thread::sleep_for(milliseconds(20));
    }
    silent.assign(pending.begin(), pending.end());
  } catch (const std::exception& e) {  // the store itself is gone: say so
    return fmt::format("the peers cannot be named ({})", one_line(e.what()));
  }
  std::vector<std::string> parts;
  if (!gone.empty()) {
    parts.push_back(fmt::format("{} exited or hangs: {} gone", rank_list(gone),
                                gone.size() > 1 ? "their processes are" : "its process is"));
  }
  // Silent peers the store saw alive, and those whose liveness it cannot tell (a TCPStore heartbeat not yet
  // seen moving): the message claims "alive" only for the first.
  std::vector<int> alive, unknown;
  for (int r : silent) (lives[static_cast<size_t>(r)] == Life::alive ? alive : unknown).push_back(r);
  if (!alive.empty()) {
    parts.push_back(fmt::format("{} exited or hangs: alive, but no failure reported within {} ms", rank_list(alive),
                                window.count()));
  }
  if (!unknown.empty()) {
    parts.push_back(
        fmt::format("{} exited or hangs: no failure reported within {} ms (the store cannot tell "
                    "whether {} alive)",
                    rank_list(unknown), window.count(), unknown.size() > 1 ? "they are" : "it is"));
  }
  if (parts.empty()) return "every peer reports the same failure";
  return fmt::format("{}", fmt::join(parts, "; "));
}

}  // namespace ddplab::dist
