// Reading a run recorded by verify/ddplab_trace (docs/trace_format.md): one manifest per rank, one
// safetensors file per rank and recorded optimizer step. Everything read is checked before it is used:
// a missing or empty directory, a rank or step that is missing, a manifest of another run, shapes that
// disagree with the manifest, a truncated or corrupt tensor file: each is a TraceError of one line,
// "<file>: <what is wrong>", which ddp_check turns into exit status 2. Steps are read one at a time, so
// memory is one step of all ranks' tensors, whatever the length of the run.
#pragma once

#include <cstdint>
#include <array>
#include <algorithm>
#include <map>
#include <set>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "src/base/errors.h"
#include "src/base/safetensors.h"
#include "src/collective/fsdp.h"
#include "src/collective/measured.h"

namespace ddplab::check {

struct TraceError : UsageError {
  using UsageError::UsageError;
};

// Ceilings on what a manifest may claim, so an absurd one is refused before anything is allocated.
constexpr int kMaxWorldSize = 1024;
constexpr size_t kMaxTensors = 100000;
constexpr int64_t kMaxSteps = 10'000'000;

struct TensorInfo {
  std::string name;
  std::vector<int64_t> shape;
  int64_t numel = 0;
  // The parameter's strides where its memory is not row-major (channels_last), else empty: DDP lays its gradient
  // into the bucket in this order. memory_order()[m] is the row-major index of the m-th element in memory.
  std::vector<int64_t> strides;
  std::vector<int64_t> memory_order() const;
};

struct DdpOptions {
  double bucket_cap_mb = 25.0;
  bool broadcast_buffers = true;
  bool find_unused_parameters = false;
  bool gradient_as_bucket_view = false;
  bool static_graph = false;
  int64_t first_bucket_bytes = 1 << 20;  // the first rebuilt bucket's cap (torch 2.x: bucket_cap_mb when given)
  std::string comm_hook;             // "" (none), "allreduce", "fp16_compress", "powerSGD", or a hook's name
  std::string comm_hook_module;      // the hook function's __module__ ("" when the recorder did not say)
  std::string comm_hook_inner;       // fp16/bf16_compress_wrapper: the wrapped hook's kind
  nlohmann::json comm_hook_state = nlohmann::json::object();    // PowerSGDState's or PostLocalSGDState's fields
};

// A parameter DDP reduces that the recorder did not record (a sparse gradient, a dtype other than float32).
struct UncheckedParam {
  std::string name, dtype, why;
};

// A float32 parameter of the module that DDP does not reduce: requires_grad was False when DDP(...) was built
// ("frozen"), or DDP was told to ignore it ("parameters_to_ignore"). The recorder keeps its digest each step and
// its values once it has changed: unfrozen and stepped, it trains on each rank's own gradient.
struct OutsideParam {
  TensorInfo info;
  std::string why;
  bool in_optimizer = false;
  int64_t initial = -1;  // its fold64 digest at DDPTrace() (-1: not recorded): a change at the first step shows
};

// The first NaN or infinity the recorder saw, at any step (recorded or not): its step, the kind of tensor
// ("input", "local", "grad", "grad_step", "param_before", "param_after") and the tensor's name.
struct NonfiniteFirst {
  int64_t step = -1;
  std::string kind, name;
};

// A model averager (post-local SGD) averaged every rank's parameters after optimizer step `after_step`.
struct Averaging {
  int64_t after_step = 0;
  int64_t group_size = 0;
};

// "allreduce_order": the all-reduce's addition order the recorder measured on the run's own communicator
// (DDPTrace(measure_order=...), docs/trace_format.md), for each bucket size.
struct MeasuredSize {
  collective::MeasuredOrder order;  // order.runs empty: the probes found no chain (why)
  std::string why;
  uint32_t digest = 0;  // fold64 of the seeded all-reduce's result, which the order must reproduce
};
struct AllreduceOrder {
  bool present = false, measured = false;
  std::string why;  // not measured: why
  int64_t seed = 0, all_reduces = 0;
  double seconds = 0;
  std::vector<MeasuredSize> sizes;
};

// "fsdp": a run of torch 2.x's fully_shard (FSDP2). Manifest::params are then this rank's shards (what the
// optimizer steps); full[i] is parameter i unsharded (what local/ holds), sharded on shard_dim[i] in chunks of
// ceil(rows / world_size); groups are FSDP's parameter groups, one reduce-scatter of a flat buffer each.
struct Fsdp {
  bool present = false;
  std::vector<TensorInfo> full;
  std::vector<int64_t> shard_dim;
  std::vector<std::vector<size_t>> groups;
  std::vector<std::string> group_modules;
  std::vector<collective::ReduceDtype> reduce_dtypes;  // per group
  std::vector<std::string> not_modelled;  // what ddp_check does not replay in this run (HSDP, offload, ...)
  int shard_world_size = 0, shard_rank = 0;  // the ranks a parameter is sharded over (HSDP: fewer than all)
};

// A collective of a sync written by hand that raised in the script (torch 1.13's Gloo refuses ReduceOp.AVG): the run
// ended there; the recorder kept the call and torch's error.
struct CollectiveError {
  int64_t step = -1;  // -1: none
  std::string op, reduce_op, param, error;
};

struct Manifest {
  CollectiveError collective_error;
  // "sync": "hand": no DistributedDataParallel; the script synchronises the gradients itself, and its own
  // collectives are recorded (StepRecord::collectives). `ddp` then holds DDP's defaults, replayed beside it.
  bool hand = false;
  std::string not_recorded;  // the recorder recorded nothing, and why (a model it does not check: FSDP, ...)
  std::string path;  // of manifest.json, for messages
  std::string run_id, backend, device, torch_version;
  int rank = 0, world_size = 0;
  int64_t every = 1;
  std::vector<int64_t> steps;
  // rank<r>/steps.log, where the whole-run steps are: each step's record (read_steps_log). A step listed in
  // `steps` is read from its own file where it has one, else from here.
  std::string log_path;
  std::map<int64_t, safetensors::Range> log;
  DdpOptions ddp;
  std::vector<TensorInfo> params, buffers;
  std::string optimizer_class;
  nlohmann::json param_groups;  // torch's param_groups, "params" as indices into params
  // ZeRO-1 (optimizer "sharded"): optimizer_class and param_groups are those of the optimizer inside
  // `sharded_by` that steps this rank's share, `owned` (sorted); each parameter is then broadcast from its owner.
  bool sharded = false;
  std::string sharded_by;
  std::vector<size_t> owned;
  // Whether this rank's optimizer steps parameter i (every one, unless sharded).
  bool steps_param(size_t i) const { return !sharded || std::binary_search(owned.begin(), owned.end(), i); }
  std::vector<size_t> first_ready_order;
  std::vector<std::vector<size_t>> torch_buckets;          // torch's rebuilt layout, when the recorder saw it
  std::vector<std::vector<size_t>> torch_buckets_initial;  // torch's layout at DDPTrace() (iteration 0)
  std::map<std::string, std::string> env;
  bool complete = true;             // false: the manifest of a rank that did not reach close() (crashed, hung)
  bool closed_at_exit = false;      // close() never called: the recorder finished the trace at the process's exit
  std::string exit_error;           // closed at exit: the error the process ended with ("" : none)
  int64_t stopped_step = -1;        // recording stopped early at this step (the recorder's own trouble)
  std::string stopped_why;
  std::string lightning_strategy;   // LightningCallback's Trainer strategy ("" : not Lightning)
  std::string framework;            // whose wrappers DDPTrace was given: "fabric", "accelerate" ("" : plain torch)
  bool join = false;                // some recorded forward ran with DDP's Join enabled
  std::vector<UncheckedParam> unchecked_params;
  std::vector<OutsideParam> outside_params;
  NonfiniteFirst nonfinite_first;
  std::vector<size_t> missing_params;          // DDP's parameters in no optimizer param group
  std::vector<std::string> missing_unchecked;  // unchecked ones in no param group
  int64_t foreign_params = 0;                  // optimizer parameters that are not the DDP module's
  std::vector<Averaging> averaging;
  // The recorder's probe: torch.sqrt on float32 is IEEE's correctly rounded sqrt in this build (false for
  // pip builds whose CPU sqrt is MKL's VML, within 1 ulp): Adam's step is then compared allclose.
  bool sqrt_exact = true;
  AllreduceOrder allreduce_order;
  Fsdp fsdp;
};

struct Backward {
  bool sync = true;
  // What forward preceded it since the previous backward: "" DDP's; "module": the wrapped module's alone
  // (ddp_model.module(x)); "none": no forward (a second backward of one graph). Only DDP's arms the all-reduce.
  std::string forward;
  std::vector<size_t> ready;  // parameter indices in the order their gradients became ready
};

// A collective the script itself called in a sync written by hand (docs/trace_format.md, "A sync written by hand"):
// what it was, on which tensor, when, and (kept) its flattened input and output, coll/<index>/in and /out.
struct Collective {
  std::string op;         // "all_reduce", "broadcast", "all_gather", "reduce_scatter"
  std::string reduce_op;  // "SUM", "AVG", "MIN", ... ("" : the op takes none)
  bool async = false;
  int64_t numel = 0;      // of the input
  std::string target;     // what it was given: a parameter's "grad", the "param" itself, or a "buffer" of its own
  std::string param;      // that parameter's name ("" : a buffer)
  bool in_backward = false;  // called from a hook during a backward
  bool in_step = false;      // called inside optimizer.step() (a sharded optimizer's broadcasts)
  int64_t backwards_done = 0;  // backwards of the step finished before it was called
  int64_t src = -1;            // broadcast's source rank
  bool other_group = false;    // on a process group other than the default one (not replayed)
  std::string dtype;           // "" : float32
  // How its result was had: "returned" (a sync call), "wait" (work.wait()), "completed-unwaited" (an async one
  // never waited, done by the step), "running-at-step" (still running when optimizer.step() read .grad).
  std::string waited;
  bool done_before_step = true;
  bool kept = false;
  std::vector<float> in, out;  // kept: the values
};

// One rank's record of one optimizer step.
struct StepRecord {
  std::string path;
  int rank = 0;
  int64_t step = 0;
  std::vector<Backward> backwards;
  std::vector<std::vector<std::string>> inputs;  // per forward, one fingerprint per sample
  std::map<std::string, int64_t> state_steps;    // Adam's step count before this step
  std::vector<double> lr;                        // per param group
  // Per param group, the hyperparameters whose value at this step differs from the manifest's (a scheduler's
  // momentum or betas, a loop's weight_decay), and how many groups the optimizer had (-1: not recorded).
  nlohmann::json group_changes = nlohmann::json::array();
  int64_t num_groups = -1;
  // zero_grad() between two of this record's backwards: before backward `before_backward`, .grad was cleared
  // (set to None, or zeroed; `none`: the parameters set to None when only some were).
  struct ZeroGrad {
    size_t before_backward = 0;
    bool set_to_none = false;
    std::set<size_t> none;
  };
  std::vector<ZeroGrad> zero_grads;
  std::map<std::string, int64_t> int_buffers;
  // Which tensors held a NaN or an infinity, by kind ("input": the forwards' indices; "local": "<k>/<name>").
  std::map<std::string, std::vector<std::string>> nonfinite;
  bool nonfinite_recorded = false;  // the recorder wrote "nonfinite" (else ddp_check looks at the values it has)
  // The parameters DDP does not reduce: their digests after the step (their values, outside/<name>, once changed).
  std::map<std::string, uint32_t> outside;
  // Which DDP iteration this is: steps of all ranks with equal (segment, index) paired their all-reduces.
  // A segment is the stretch between two Join context boundaries (without Join: one segment, index = step).
  int64_t segment = 0, index = 0;
  bool join = false;                      // its forward ran with DDP's Join enabled
  // The recorder left param_before/ out: it equals the previous step's param_after/ (check.cc fills it in).
  bool param_before_is_previous = false;
  // The recorder left grad_step/ out: it equals grad/ (find("grad_step", ...) gives grad/'s tensor).
  bool grad_step_is_grad = false;
  // A whole-run step ("mode": "digests"): the recorder kept no local gradients and only digests of the rest, so
  // ddp_check compares the ranks' digests with each other instead of replaying DDP (docs/trace_format.md).
  bool digests_only = false;
  // A whole-run step's sample (docs/trace_format.md, "The sample"): the same `slots` elements on every rank, each
  // kind's values ("prior", "local/<k>", "grad", "grad_step", "param_before", "param_after", "state/<key>",
  // "state_after/<key>") and the slots a kind lacks (a parameter without that tensor). slots = 0: no sample.
  struct Sample {
    size_t slots = 0;
    std::map<std::string, std::vector<float>> values;
    std::map<std::string, std::set<size_t>> absent;
    bool has(const std::string& kind, size_t slot) const {
      auto a = absent.find(kind);
      return values.count(kind) && (a == absent.end() || !a->second.count(slot));
    }
  };
  Sample sample;
  // A whole-run step's weighted sums (docs/trace_format.md, "The weighted sums"): kind ("prior", "local/<k>",
  // "grad") -> per parameter {S, A, Q} in float64 (Q: the sum of squares, for the report's norms); NaN where the
  // parameter has no such tensor (and A of "grad"). wsum_columns = 0: none kept.
  size_t wsum_columns = 0;
  std::map<std::string, std::vector<std::array<double, 3>>> wsum;
  // Optimizer state the recorder saw changed (in place, or replaced) since the previous step's optimizer.step()
  // left it, "<name>/<key>" (whole-run steps).
  std::vector<std::string> state_changed;
  bool divide_by_initial_world_size = true;
  std::vector<Collective> collectives;  // a sync written by hand: the script's own, in the order called
  safetensors::TensorMap tensors;
  // Digests of tensors the recorder left out ("<kind>/<name>" -> CRC-32 of the float32 bytes): what ddp_check
  // predicts (.grad after DDP, param_after/, the optimizer state), compared with the prediction's digest; where
  // they agree the prediction is filled in as the tensor (docs/trace_format.md, "Digests").
  std::map<std::string, uint32_t> crc32;
  // How those digests were taken (metadata "digest"): fold64 since the recorder of 2026-11-28, crc32 before.
  bool fold64 = false;
  // The digest of float32 values as this record's digests are taken.
  uint32_t digest_of(const float* values, size_t n) const;
  uint32_t digest_of(const std::vector<float>& values) const { return digest_of(values.data(), values.size()); }

  // The tensor "<kind>/<name>", or null when the recorder did not write it (nor was it filled in).
  const safetensors::Tensor* find(const std::string& kind, const std::string& name) const;
  // Its digest: the recorded one, or the tensor's own; false when there is neither.
  bool digest(const std::string& kind, const std::string& name, uint32_t* out) const;
};

// zlib's CRC-32 of the values' float32 bytes (little-endian), as the recorder computes it.
uint32_t crc32_of(const std::vector<float>& values);
uint32_t crc32_of(const float* values, size_t n);
// The recorder's fold64 digest (docs/trace_format.md, "Digests"): the float32 bytes as little-endian 64-bit
// words (a last odd float is a word's low half), summed modulo 2^64 into 1021 columns (word j into column
// j mod 1021), then zlib's CRC-32 of the 1021 sums' little-endian bytes. Integer sums are exact in any
// order, so the recorder folds with torch's own sum on any device, at a fraction of a CRC's cost.
uint32_t fold64_of(const float* values, size_t n);

struct Run {
  std::string dir;
  std::vector<Manifest> ranks;  // ranks[r].rank == r
  std::vector<int64_t> steps;   // rank 0's recorded steps (others may differ: Join, a rank that stopped)
  int world_size() const { return static_cast<int>(ranks.size()); }
  const Manifest& first() const { return ranks.front(); }
  int64_t total_steps() const;  // every rank's recorded steps together
};

// Reads and cross-checks every rank's manifest: one run id, one world size, ranks 0..N-1 all present,
// the same parameters and options. Ranks may have recorded different steps. Throws TraceError.
Run open_run(const std::string& dir);

// rank's record of `step`, its tensors checked against the manifest's shapes. Throws TraceError.
StepRecord read_step(const Run& run, int rank, int64_t step);
// Indexes <rank dir>/steps.log into m->log, where it exists: records of a 16-byte frame (byte count, step; little-
// endian uint64) and a step file's bytes, steps ascending. A last record cut short (the process killed while it
// wrote) is left out. A rank whose manifest is not complete (killed, or its manifest last written before its
// last steps) also lists the whole records after its last listed step.
void read_steps_log(const std::string& rank_dir, Manifest* m);

// The step file's path.
std::string step_path(const std::string& dir, int rank, int64_t step);

}  // namespace ddplab::check
