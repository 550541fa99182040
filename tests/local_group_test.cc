// The Communicator interface through LocalGroup (threads, the simulator's algorithms): collectives are
// correct, time out naming the collective, and a DDP run of one thread per rank equals ddp_sim bit for bit.
#include <thread>

#include <gtest/gtest.h>

#include "src/comm/local_group.h"
#include "src/ddp/trainer.h"

namespace ddplab {
namespace {

template <typename F>
void on_ranks(comm::LocalGroup& g, int n, F f) {
  std::vector<std::thread> ts;
  for (int r = 0; r < n; ++r)
    ts.emplace_back([&, r] {
      auto c = g.communicator(r);
      f(*c);
    });
  for (auto& t : ts) t.join();
}

TEST(LocalGroup, CollectivesAreCorrect) {
  const int n = 4;
  comm::LocalGroup g(n, collective::Algorithm::ring);
  on_ranks(g, n, [&](comm::Communicator& c) {
    std::vector<float> x(5, static_cast<float>(c.rank() + 1));
    c.all_reduce(x.data(), x.size(), comm::ReduceOp::sum);
    EXPECT_EQ(x, std::vector<float>(5, 10.0f));
    std::vector<float> b(3, static_cast<float>(c.rank()));
    c.broadcast(b.data(), b.size(), 2);
    EXPECT_EQ(b, std::vector<float>(3, 2.0f));
    const auto names = comm::all_gather_strings(c, std::string(static_cast<size_t>(c.rank()), 'x'));
    ASSERT_EQ(names.size(), 4u);
    EXPECT_EQ(names[3], "xxx");
    c.barrier();
  });
}

TEST(LocalGroup, TimeoutNamesTheCollective) {
  comm::LocalGroup g(2, collective::Algorithm::ring);
  auto c = g.communicator(0);
  c->timeout = std::chrono::milliseconds(50);
  float x = 1;
  try {
    c->all_reduce(&x, 1, comm::ReduceOp::sum);  // rank 1 never comes
    FAIL() << "expected a timeout";
  } catch (const comm::CommError& e) {
    EXPECT_NE(std::string(e.what()).find("all_reduce #0 timed out after 50 ms: only 1 of 2 ranks arrived"),
              std::string::npos)
        << e.what();
  }
}

TEST(TrainRank, ThreadsOverLocalGroupEqualTheSimulator) {
  for (int ws : {2, 3}) {
    ddp::Config cfg;
    cfg.world_size = ws;
    cfg.epochs = 2;
    cfg.layers = {6, 16, 2};
    cfg.relu = true;
    cfg.no_sync = 2;
    cfg.batch_size = 4;
    cfg.init = ddp::InitKind::per_rank;
    const ddp::SimResult sim = ddp::simulate(cfg, false);
    comm::LocalGroup g(ws, cfg.allreduce);
    std::vector<ddp::RankResult> real(static_cast<size_t>(ws));
    on_ranks(g, ws, [&](comm::Communicator& c) { real[static_cast<size_t>(c.rank())] = ddp::train_rank(cfg, c); });
    for (int r = 0; r < ws; ++r) {
      const auto a = real[static_cast<size_t>(r)].replica->model.parameters();
      const auto b = sim.replicas[static_cast<size_t>(r)]->model.parameters();
      for (size_t i = 0; i < a.size(); ++i) EXPECT_EQ(a[i]->value, b[i]->value) << "rank " << r << " " << a[i]->name;
      EXPECT_EQ(real[static_cast<size_t>(r)].sampler_indices[1], sim.sampler_indices[1][static_cast<size_t>(r)]);
    }
  }
}

}  // namespace
}  // namespace ddplab
