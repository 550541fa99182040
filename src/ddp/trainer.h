// "A DDP step", once: dataset, replica construction, forward/backward, bucketed all-reduce, optimizer.
// simulate() runs all ranks in one process; the verifier runs one Replica per process with the same code.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "src/comm/communicator.h"
#include "src/data.h"
#include "src/ddp/config.h"
#include "src/ddp/reducer.h"
#include "src/loss.h"
#include "src/nn.h"
#include "src/optim.h"
#include "src/parallel.h"

namespace ddplab::ddp {

// random: manual_seed(seed), then per sample randn(in), randn(out) (notebook 000); labels = argmax(y).
// rand: manual_seed(seed), then per sample rand(in), rand(out) (notebook 003's MyTrainDataset).
// toy: notebook 001's five 2-d points with labels 0,0,0,1,1 (y = one-hot labels).
// digits: load_digits, then manual_seed(seed); perm = randperm(1797); train = perm[:1500], and `test`
// (when given) gets perm[1500:].
// `gen` plays the process's global generator (each real rank has its own; so does each simulated one).
Dataset make_dataset(const Config& cfg, Generator& gen, Dataset* test = nullptr);

// manual_seed(seed) (or seed + rank with --init per-rank; or, with --init continue, the draws right after
// the dataset's), then the model: the MLP with state_dict names layers.N, or the --model spec's layers.
Sequential make_model(const Config& cfg, int64_t rank, Generator& gen);
// SGD or Adam over the model's parameters; with cfg.zero and a rank (>= 0), that rank's
// ZeroRedundancyOptimizer (src/ddp/zero.h) over the same parameters, the same optimizer on its shard.
std::unique_ptr<Optimizer> make_optimizer(const Config& cfg, Module& model, int64_t rank = -1);
LossResult compute_loss(const Config& cfg, const Matrix& out, const Dataset& data, const std::vector<int64_t>& idx);

// Whether every rank's model initialisation draws the same values (--init same or continue: every rank
// seeds alike), so that the simulator draws it once and copies it.
inline bool draws_alike(const Config& cfg) { return cfg.init != InitKind::per_rank; }

// One rank: its model replica, optimizer, sampler and reducer. Not movable: they point into each other.
struct Replica {
  Replica(const Config& cfg, int64_t rank);
  // What Replica(cfg, rank) builds when rank seeds as like.rank did (draws_alike): like's parameters,
  // buffers and generator state as like's construction left them, copied instead of drawn again.
  Replica(const Config& cfg, int64_t rank, const Replica& like);
  Replica(const Replica&) = delete;
  Replica& operator=(const Replica&) = delete;

  // Forward, loss and backward on the samples `idx` (grads accumulate, as under no_sync). Returns the loss.
  float forward_backward(const Dataset& data, const std::vector<int64_t>& idx);

  int64_t rank;
  Generator gen;  // this rank's "global" generator: model init, DataLoader draws, Dropout masks
  Sequential model;
  std::vector<Parameter*> ready;  // the last backward's gradient-ready order (the Reducer's rebuild)
  std::unique_ptr<Optimizer> optimizer;
  DistributedSampler sampler;
  DataLoader loader;
  std::unique_ptr<Reducer> reducer;  // created after DDP's broadcast (simulate, train_rank)
  const Config& cfg;
};

// Which micro-batches all-reduce: every no_sync-th one and the last of the epoch.
inline bool is_sync_batch(const Config& cfg, size_t b, size_t num_batches) {
  return (b + 1) % static_cast<size_t>(cfg.no_sync) == 0 || b + 1 == num_batches;
}

// The simulator's synchronised backward over every rank's Reducer: bucket by bucket, prepare (grad *
// 1/ws), all-reduce with `algorithm`, finalize; block by block in a ~1 MiB buffer per thread, so memory
// is parameters + gradients per rank. With a hook (--explain), whole buckets in one workspace of
// world_size x the largest bucket, kept across steps.
class InProcessAllreduce {
 public:
  using Hook = std::function<void(size_t bucket, const std::vector<float*>& bufs, size_t n)>;
  // With a pool, the ranks' buckets are prepared and finalized side by side and the all-reduce is split
  // into spans of elements (collective::Span: the same bits).
  // Only the first `num_buckets` buckets when fewer: DDP reduces buckets in order as they fill, and stops
  // at one that waits for a grad that never comes (find_unused_parameters=False with an unused parameter).
  void run(const std::vector<Reducer*>& reducers, collective::Algorithm algorithm, const Hook& before = nullptr,
           ThreadPool* pool = nullptr, size_t num_buckets = SIZE_MAX);

 private:
  std::vector<std::vector<float>> workspace_;
};

struct BatchLog {
  int64_t epoch, rank, batch_size;
  float loss;
};

struct SimResult {
  std::vector<std::unique_ptr<Replica>> replicas;
  std::vector<std::vector<std::vector<int64_t>>> sampler_indices;  // [epoch][rank]
  std::vector<BatchLog> log;                                       // in (epoch, batch, rank) order
  std::unique_ptr<Replica> single_device;                          // one model on the union of the shards
  std::vector<float> single_device_losses;                         // its loss per batch (--report)
  std::string buckets_first, buckets_rebuilt;
  int64_t optimizer_steps = 0;
  // --dataset digits: each rank's accuracy on the test set after training (evaluated as DDP(model) in
  // eval mode evaluates: rank 0's buffers broadcast first), and the single device's.
  std::vector<int64_t> test_correct;  // of test_size
  int64_t single_device_test_correct = 0;
  int64_t test_size = 0;
  std::vector<std::vector<HookReport>> hook_reports;  // --comm-hook: rank 0's, [synchronised step][bucket]
};

struct SimHooks {
  // Called before every bucket all-reduce with the ranks' prepared buckets (sync = 0, 1, ...).
  std::function<void(int64_t sync, size_t bucket, const std::vector<float*>& bufs, size_t n)> before_allreduce;
};

// The replicas keep a reference to `cfg`: it must outlive the result. Runs on cfg.threads threads.
SimResult simulate(const Config& cfg, bool single_device, const SimHooks& hooks = {});

// One real rank of a multi-process run: the same loop as simulate(), with `comm` carrying the
// broadcast at construction and every bucket's all-reduce.
struct RankResult {
  std::unique_ptr<Replica> replica;
  std::vector<std::vector<int64_t>> sampler_indices;  // [epoch]
  std::vector<BatchLog> log;
  int64_t optimizer_steps = 0;
  int64_t test_correct = -1;  // --dataset digits only
  double train_seconds = 0;   // wall time of the training loop only (no data, model or connection setup)
  std::vector<std::vector<HookReport>> hook_reports;  // --comm-hook: [synchronised step][bucket]
};
// `kernels` run Linear: the backend's (dist::Rank::kernels; the NCCL backend runs Linear on the GPU).
RankResult train_rank(const Config& cfg, comm::Communicator& comm, const LinearKernels& kernels);
// With the CPU's kernels, cpu_kernels(cfg.kernels).
RankResult train_rank(const Config& cfg, comm::Communicator& comm);

// The training loop both share: epochs of micro-batches over the replicas this process runs (all of them
// in the simulator, one in a real rank), `sync` all-reducing their buckets on every synchronised batch.
// `single` (simulator only) trains on the union of the local replicas' batches. With a pool the replicas
// (and `single`) compute side by side between all-reduces: each writes only its own model, so the bits
// are those of one thread. `progress`: show batches done on a terminal (src/progress.h).
using SyncFn = std::function<void(const std::vector<Reducer*>&)>;
struct TrainLog {
  std::vector<std::vector<std::vector<int64_t>>> sampler_indices;  // [epoch][local replica]
  std::vector<BatchLog> log;                                       // in (epoch, batch, local replica) order
  int64_t optimizer_steps = 0;
  std::vector<float> single_losses;  // `single`'s loss per batch
};
// `sync_buffers(local, src, false)` runs DDP's buffer broadcast from rank `src` over the local replicas when
// syncs_buffers_before says so; `sync_buffers(local, src, true)` is Join's final model broadcast (parameters
// and buffers). --uneven: a rank past its last batch of the epoch computes nothing and, with --join, its
// Reducer shadows the all-reduces with zeros (Reducer::set_join_state); without --join the loop stops at
// the first all-reduce a rank never reaches: `out_of_batches(line)` runs on a real rank that ran out (it
// must not pair a collective with the others' all-reduce), a RunError(line) everywhere else.
using BufferSyncFn = std::function<void(const std::vector<Replica*>&, int64_t src, bool with_params)>;
// `after_step` (--zero) runs once every local replica has stepped: ZeroRedundancyOptimizer's broadcast.
using StepFn = std::function<void(const std::vector<Replica*>&)>;
using OutOfBatchesFn = std::function<void(const std::string& line)>;
TrainLog run_epochs(const Config& cfg, const Dataset& data, const std::vector<Replica*>& local, Replica* single,
                    const SyncFn& sync, const BufferSyncFn& sync_buffers, ThreadPool* pool = nullptr,
                    bool progress = false, const StepFn& after_step = nullptr,
                    const OutOfBatchesFn& out_of_batches = nullptr);

// DDP(model) for one replica: with cfg.broadcast, `broadcast(rep)` gives it rank 0's parameters; then its
// Reducer, with cfg.comm_hook registered (compared with the built-in averaging when cfg.compare_hook). simulate()
// copies from replica 0; train_rank() broadcasts over the communicator.
void init_ddp(const Config& cfg, Replica& rep, const std::function<void(Replica&)>& broadcast);

// DDP's buffer broadcast (broadcast_buffers=True): before a training forward, when the forward before it
// synchronised gradients (or it is the first), every rank takes rank 0's buffers.
inline bool syncs_buffers_before(const Config& cfg, size_t b, size_t num_batches) {
  return cfg.broadcast_buffers && (b == 0 || is_sync_batch(cfg, b - 1, num_batches));
}

// Copies every buffer of `from` into `to` (the simulator's broadcast).
void copy_buffers(const Module& from, Module& to);

// model.eval() and how many of `test` the output's argmax gets right (the whole set in one forward, as
// `(model(x_test).argmax(1) == y_test).sum()` does), then model.train() again.
int64_t test_correct(const Config& cfg, Module& model, const Dataset& test);

// "[rank0] Epoch: 001/003 | Batch size 002 | Loss: 0.75"
std::string progress_line(const BatchLog& l, int64_t epochs);

}  // namespace ddplab::ddp
