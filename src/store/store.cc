// The store flags (--store parsed into a StoreSpec, --run-id) and what every store shares. The stores
// themselves: file_store.cc, redis_store.cc, tcpstore_store.cc; open_store.cc picks one.
#include "src/store/store.h"

#include <fmt/format.h>

#include "src/base/flags.h"
#include "src/store/deadline.h"

namespace ddplab::dist {

using std::chrono::milliseconds;

std::string one_line(std::string s) {
  for (char& c : s) {
    if (c == '\r' || c == '\n') c = ' ';
  }
  return s.substr(0, 200);
}

StoreSpec parse_store(const std::string& text) {
  StoreSpec s;
  if (text.rfind("tcp://", 0) == 0) {  // HOST:PORT or [IPv6]:PORT; the port is required (no default)
    s.kind = StoreKind::tcpstore;
    const std::string rest = text.substr(6);
    const size_t colon = rest.rfind(':');
    std::string port = colon == std::string::npos ? "" : rest.substr(colon + 1);
    s.host = colon == std::string::npos ? "" : rest.substr(0, colon);
    if (s.host.size() > 2 && s.host.front() == '[' && s.host.back() == ']')
      s.host = s.host.substr(1, s.host.size() - 2);
    int64_t p = 0;
    try {
      p = parse_int("--store port", port);
    } catch (const UsageError&) {
      p = 0;
    }
    if (s.host.empty() || s.host.find_first_of("[]@/") != std::string::npos || p < 1 || p > 65535) {
      throw UsageError(fmt::format("--store must be tcp://HOST:PORT with a port in [1, 65535] (got '{}')", text));
    }
    s.port = static_cast<int>(p);
    return s;
  }
  if (text.rfind("file:", 0) == 0) {
    s.kind = StoreKind::file;
    s.path = text.substr(5);
    if (s.path.empty()) throw UsageError("--store file:DIR needs a directory");
    return s;
  }
  if (text.rfind("redis://", 0) == 0) {
    s.kind = StoreKind::redis;
    std::string rest = text.substr(8);
    std::string shown = text;  // never echo a password
    if (const size_t at = rest.rfind('@'); at != std::string::npos) {
      const std::string userinfo = rest.substr(0, at);
      rest = rest.substr(at + 1);
      const size_t colon = userinfo.find(':');
      shown = "redis://" + (colon == std::string::npos ? std::string("***") : userinfo.substr(0, colon) + ":***") +
              "@" + rest;
      if (colon == std::string::npos || colon + 1 == userinfo.size()) {
        throw UsageError(
            fmt::format("--store must be redis://[USER]:PASSWORD@HOST:PORT with a non-empty password "
                        "after the colon (got '{}')",
                        shown));
      }
      s.user = userinfo.substr(0, colon);
      s.password = userinfo.substr(colon + 1);
    }
    std::string port = "6379";
    if (!rest.empty() && rest[0] == '[') {  // [IPv6]:PORT
      const size_t close = rest.find(']');
      if (close != std::string::npos) {
        s.host = rest.substr(1, close - 1);
        if (close + 1 < rest.size()) port = rest[close + 1] == ':' ? rest.substr(close + 2) : "x";
      }
    } else {
      const size_t colon = rest.rfind(':');
      s.host = rest.substr(0, colon);
      if (colon != std::string::npos) port = rest.substr(colon + 1);
    }
    int64_t p = 0;
    try {
      p = parse_int("--store port", port);
    } catch (const UsageError&) {
      p = 0;
    }
    if (s.host.empty() || p < 1 || p > 65535) {
      throw UsageError(fmt::format("--store must be redis://HOST:PORT with a port in [1, 65535] (got '{}')", shown));
    }
    s.port = static_cast<int>(p);
    return s;
  }
  throw UsageError(fmt::format("--store must be file:DIR, redis://HOST:PORT or tcp://HOST:PORT (got '{}')",
                               text.find('@') == std::string::npos ? text : "..."));
}

void check_run_id(const std::string& id) {
  const bool ok =
      !id.empty() && id.size() <= 64 && id != "." && id != ".." &&
      id.find_first_not_of("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789._-") == std::string::npos;
  if (!ok) throw UsageError(fmt::format("--run-id must be 1 to 64 characters from A-Z a-z 0-9 . _ - (got '{}')", id));
}

const char* store_server_name(StoreServer s) {
  switch (s) {
    case StoreServer::tcpstore_v1:
      return "tcpstore-1.x";
    case StoreServer::tcpstore_v2:
      return "tcpstore-2.x";
    case StoreServer::redis:
      return "redis";
    case StoreServer::unknown:
      break;
  }
  return "unknown";
}

std::optional<StoreServer> parse_store_server(const std::string& name) {
  for (StoreServer s : {StoreServer::tcpstore_v1, StoreServer::tcpstore_v2, StoreServer::redis}) {
    if (name == store_server_name(s)) return s;
  }
  return std::nullopt;
}

void store_set(Store& s, const std::string& key, const std::string& value) { s.put(s.key(key), value); }

std::string store_get(Store& s, const std::string& key, milliseconds timeout) {
  std::optional<std::string> v;
  if (!poll_until(Clock::now() + timeout, [&] { return (v = s.fetch(s.key(key))).has_value(); })) {
    throw SetupError(fmt::format("no '{}' in {} within {} ms", key, s.describe, timeout.count()));
  }
  return *v;
}

}  // namespace ddplab::dist
