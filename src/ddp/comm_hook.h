// DDP communication hooks (torch.distributed.algorithms.ddp_comm_hooks, torch 1.13): what a synchronised
// backward does with each gradient bucket. register_comm_hook(state, hook) replaces the Reducer's
// built-in averaging: the bucket then holds this rank's RAW gradients (no 1/world_size multiply), the hook
// is called once per bucket in index order and leaves the averaged gradients in the bucket, which the
// Reducer copies back into .grad. Every synchronisation site (bucket_sync.h: the Gloo verifier, the
// simulator's hooked path, the tiny GPT) calls CommHook::run; without a hook they keep the built-in
// predivide.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "src/comm/communicator.h"
#include "src/base/flags.h"

namespace ddplab::ddp {

// GradBucket as a hook sees it (torch.distributed.GradBucket): index(), is_last(), buffer(), and
// gradients() as the parameters' offsets and shapes in the flat buffer.
struct GradBucket {
  size_t index = 0;
  bool is_last = false;     // the last bucket of this backward: state.iter advances after it
  float* buffer = nullptr;  // numel floats: this rank's raw gradients in, the averaged gradients out
  size_t numel = 0;
  std::vector<size_t> offsets;               // where each parameter's gradient starts
  std::vector<std::vector<int64_t>> shapes;  // its shape, as torch reports it
  std::vector<std::string> names;            // its state_dict name (for --explain)
};

// What one bucket's hook put on the wire, and (with --explain) how far its result is from the built-in
// average of the same gradients.
struct HookReport {
  std::string sent;        // "float16 x 366610", "float32: 138 as is, P 1x64x1 + 1x64x1, Q ...", ...
  size_t bytes = 0;        // bytes this rank contributed to the bucket's all-reduces
  int64_t differ = -1;     // values that differ from the built-in average (-1: not compared)
  int64_t max_ulps = 0;    // the largest difference, in float32 ulps (large near zero, where sums cancel)
  float max_abs_diff = 0;  // the largest |hook - built-in|
  int64_t nonfinite = 0;   // inf or NaN results (float16 overflows): no bitwise claim is made for them
  size_t numel = 0;        // the bucket's values (set by the caller of run)
};

class CommHook {
 public:
  virtual ~CommHook() = default;
  virtual std::string name() const = 0;
  // Average the bucket across the ranks of `comm`, in place. Every rank calls it with the same bucket.
  virtual HookReport run(GradBucket& bucket, comm::Communicator& comm) = 0;
};

// --comm-hook and the hook states' options (PowerSGDState's names).
struct CommHookOptions {
  std::string name = "none";        // none | allreduce | fp16-compress | bf16-compress | powersgd | noop
  int64_t powersgd_rank = 1;        // matrix_approximation_rank
  int64_t powersgd_start_iter = 2;  // start_powerSGD_iter (PyTorch's default is 1000; 2 is its minimum)
  int64_t powersgd_min_compression_rate = 2;
  bool powersgd_error_feedback = true;  // use_error_feedback
  bool powersgd_warm_start = true;      // warm_start
  uint64_t powersgd_random_seed = 0;    // random_seed
};

// "none", "allreduce", ...: the --comm-hook choices.
const std::vector<std::string>& comm_hook_names();
// Reads --comm-hook, --powersgd-rank (1..2: torch orthogonalises higher ranks with LAPACK's QR) and
// --powersgd-start-iter (>= 2: PowerSGDState refuses less with error feedback or warm start); UsageError
// naming the flag and its limit otherwise. `o` holds the defaults.
void read_comm_hook_flags(const Flags& f, CommHookOptions& o);
// The three flags' usage lines.
const char* comm_hook_usage();
// What ddp_sim / ddp_verify print as the hook in the config line ("" for none).
std::string describe(const CommHookOptions& o);

// One rank's hook (hooks keep per-rank state: PowerSGD's error feedback and warm-started Q), or null for
// "none". Throws std::invalid_argument for an unknown name.
std::unique_ptr<CommHook> make_comm_hook(const CommHookOptions& options);

// The table ddp_sim and ddp_verify print: rank 0's buckets, step by step (the first steps and the last).
std::string format_hook_reports(const std::string& hook, const std::vector<std::vector<HookReport>>& steps);

// --explain: runs `inner`, then the built-in arithmetic (grad * float(1/ws), SUM all-reduce: one extra
// collective on every rank) on a copy of the same raw gradients, and reports how the two differ.
std::unique_ptr<CommHook> compared_to_builtin(std::unique_ptr<CommHook> inner);

}  // namespace ddplab::ddp
