// A Redis server as the store (redis_store.h); the client is redis.h.
#include "src/store/redis_store.h"

#include <cstdlib>

#include <fmt/format.h>

#include "src/store/redis.h"

namespace ddplab::dist {

namespace {

constexpr const char* kExpirySeconds = "604800";  // Redis keys expire after a week: a shared server stays clean

StoreSpec with_env_password(StoreSpec s) {
  if (s.password.empty()) {
    if (const char* p = std::getenv("DDPLAB_REDIS_PASSWORD"); p && *p) s.password = p;
  }
  return s;
}

class RedisStore : public Store {
 public:
  explicit RedisStore(const StoreSpec& spec) : spec_(spec), main_(redis_open(spec)) { describe = redis_where(spec); }

  void put(const std::string& key, const std::string& value) override {
    const Reply r = cmd(*main_, {"SET", key, value, "EX", kExpirySeconds});
    if (r.type != '+') throw SetupError(fmt::format("{}: SET {} failed: {}", describe, key, one_line(r.str)));
  }
  std::optional<std::string> fetch(const std::string& key) override {
    const Reply r = cmd(*main_, {"GET", key});
    if (r.type == '$' && r.nil) return std::nullopt;
    if (r.type != '$') throw SetupError(fmt::format("{}: GET {} failed: {}", describe, key, one_line(r.str)));
    return r.str;
  }
  bool exists(const std::string& key) override {
    const Reply r = cmd(*main_, {"EXISTS", key});
    if (r.type != ':') throw SetupError(fmt::format("{}: EXISTS {} failed: {}", describe, key, one_line(r.str)));
    return r.integer > 0;
  }

  // A connection of its own, named after the rank: Redis drops it when the process ends, and CLIENT LIST
  // shows who is still there. The name is published (once, at join) so that peers know to look for it.
  void hold_alive(const std::string& scope, int rank) override {
    try {
      if (!life_) life_ = redis_open(spec_);
      const std::string name = client_name(scope, rank);
      if (cmd(*life_, {"CLIENT", "SETNAME", name}).type == '+') put(scope + "/" + fmt::format("alive_{}", rank), name);
    } catch (const SetupError&) {  // liveness unknown: peers wait for this rank's report instead
    }
  }
  std::vector<Life> lives(const std::string& scope, int world_size) override {
    std::vector<Life> out(static_cast<size_t>(world_size), Life::unknown);
    const Reply list = cmd(*main_, {"CLIENT", "LIST"}, 64u << 20);
    if (list.type != '$') return out;  // CLIENT forbidden here (ACL, renamed command): unknown
    for (int r = 0; r < world_size; ++r) {
      const std::string name = client_name(scope, r);
      if (!exists(scope + "/" + fmt::format("alive_{}", r))) continue;  // it never registered: unknown
      out[static_cast<size_t>(r)] =
          list.str.find(" name=" + name + " ") != std::string::npos ? Life::alive : Life::gone;
    }
    return out;
  }

 private:
  static std::string client_name(const std::string& scope, int rank) {
    return fmt::format("ddplab/{}/{}", scope, rank);
  }
  Reply cmd(RedisConn& c, const std::vector<std::string>& args, size_t max_bulk = kMaxValueBytes) {
    try {
      return c.command(args, kStoreIoMs, max_bulk);
    } catch (const RedisIoError& e) {
      throw SetupError(fmt::format("{}: {} failed: {}", describe, args[0], e.what()));
    }
  }

  StoreSpec spec_;
  std::unique_ptr<RedisConn> main_, life_;
};

}  // namespace

void check_redis_store(const StoreSpec& spec) { redis_open(with_env_password(spec)); }

std::shared_ptr<Store> open_redis_store(const StoreSpec& spec) {
  return std::make_shared<RedisStore>(with_env_password(spec));
}

}  // namespace ddplab::dist
