// Debian's libgloo links and its in-process store works (the verifier's tests use HashStore).
#include <gloo/rendezvous/hash_store.h>
#include <gtest/gtest.h>

TEST(GlooLink, HashStoreRoundTrip) {
  gloo::rendezvous::HashStore store;
  store.set("rank0", std::vector<char>{'o', 'k'});
  EXPECT_EQ(store.get("rank0"), (std::vector<char>{'o', 'k'}));
}
