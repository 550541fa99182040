// The store spec (src/store/store.h) and the factory above the stores (src/store/open_store.h): --store is
// parsed once into a StoreSpec whose kind is an enum (nothing unknown falls through to Redis), and a
// TCPStore is probed once: the spec records the server, and whoever opens it later (a rank of our launcher)
// does not probe again. The probes are counted on a fake 2.x server (tests/fake_tcpstore.h), which counts
// PING, the query only identify_store_server sends.
#include <string>

#include <gtest/gtest.h>

#include "src/store/open_store.h"
#include "src/store/store.h"
#include "tests/fake_tcpstore.h"
#include "tests/testing.h"

namespace ddplab {
namespace {

using dist::StoreKind;
using dist::StoreServer;

std::string refusal(const std::string& text) {
  try {
    dist::parse_store(text);
  } catch (const UsageError& e) {
    return e.what();
  }
  return "<accepted>";
}

TEST(StoreSpec, EachKindParsedOnce) {
  const auto file = dist::parse_store("file:/tmp/x");
  EXPECT_EQ(file.kind, StoreKind::file);
  EXPECT_EQ(file.path, "/tmp/x");
  const auto redis = dist::parse_store("redis://me:pw@example.org:7000");
  EXPECT_EQ(redis.kind, StoreKind::redis);
  EXPECT_EQ(redis.host, "example.org");
  EXPECT_EQ(redis.port, 7000);
  EXPECT_EQ(redis.user, "me");
  EXPECT_EQ(redis.password, "pw");
  EXPECT_EQ(dist::parse_store("redis://[::1]").port, 6379) << "Redis' default port";
  const auto tcp = dist::parse_store("tcp://[::1]:29500");
  EXPECT_EQ(tcp.kind, StoreKind::tcpstore);
  EXPECT_EQ(tcp.host, "::1");
  EXPECT_EQ(tcp.port, 29500);
  EXPECT_EQ(tcp.server, StoreServer::unknown) << "nothing is probed while parsing";
}

TEST(StoreSpec, UnknownSchemesAreRefusedNotTakenForRedis) {
  for (const std::string text : {"rediss://h:1", "tcp:/h:1", "http://h:1", "h:6379", ""}) {
    const std::string why = refusal(text);
    EXPECT_NE(why.find("--store must be file:DIR, redis://HOST:PORT or tcp://HOST:PORT"), std::string::npos)
        << "'" << text << "': " << why;
  }
  EXPECT_EQ(refusal("redis://:secret@h:1:2").find("secret"), std::string::npos) << "a password is never echoed";
}

TEST(StoreSpec, ServerNamesRoundTrip) {
  for (StoreServer s : {StoreServer::tcpstore_v1, StoreServer::tcpstore_v2, StoreServer::redis}) {
    EXPECT_EQ(dist::parse_store_server(dist::store_server_name(s)), s) << dist::store_server_name(s);
  }
  EXPECT_FALSE(dist::parse_store_server("unknown").has_value());
  EXPECT_FALSE(dist::parse_store_server("tcpstore").has_value());
}

TEST(OpenStore, ARecordedServerIsNotProbedAgain) {
  testing::FakeTcpStore2 fake(true);
  ASSERT_GT(fake.port(), 0);
  const auto spec = dist::parse_store("tcp://127.0.0.1:" + std::to_string(fake.port()));
  const auto checked = dist::check_store(spec);
  EXPECT_EQ(checked.server, StoreServer::tcpstore_v2);
  EXPECT_EQ(fake.pings(), 1) << "check_store probes once";
  auto store = dist::open_store(checked, "known");
  store->put("known/k", "v");
  EXPECT_EQ(store->fetch("known/k").value_or("<missing>"), "v");
  EXPECT_EQ(fake.pings(), 1) << "opening a spec with its server recorded probes nothing";
  dist::open_store(spec, "unknown");
  EXPECT_EQ(fake.pings(), 2) << "a spec without a server is probed when opened";
  EXPECT_EQ(fake.unvalidated(), 0) << "every store connection opened with VALIDATE";
  std::printf("probes: check_store 1, open_store of the checked spec 0, of the unchecked spec 1\n");
}

TEST(OpenStore, IdentifyStoreRecordsTheKindAndServer) {
  testing::FakeTcpStore2 fake(true);
  ASSERT_GT(fake.port(), 0);
  const auto spec = dist::identify_store("127.0.0.1", fake.port(), std::chrono::milliseconds(5000));
  EXPECT_EQ(spec.kind, StoreKind::tcpstore);
  EXPECT_EQ(spec.server, StoreServer::tcpstore_v2);
  dist::open_store(spec, "id");
  EXPECT_EQ(fake.pings(), 1);
}

// The launcher checks --store once and hands the identified server to its ranks: a run of 2 ranks probes
// the TCPStore once (before: three times, the launcher and each rank).
TEST(OpenStore, LaunchedRanksTakeTheLaunchersProbe) {
  testing::FakeTcpStore2 fake(true);
  ASSERT_GT(fake.port(), 0);
  const auto r = testing::run_command({"verify/ddp_verify", "--nproc", "2", "--store",
                                       "tcp://127.0.0.1:" + std::to_string(fake.port()), "--epochs", "1", "--quiet",
                                       "--timeout", "20"});
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_NE(r.out.find("verified: every rank bitwise identical"), std::string::npos) << r.out;
  EXPECT_EQ(fake.pings(), 1) << "only the launcher probes the server";
  EXPECT_EQ(fake.unvalidated(), 0);
}

}  // namespace
}  // namespace ddplab
