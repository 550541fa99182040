#include "src/report/report.h"

#include <utility>

#include <fmt/format.h>

#include "src/base/io.h"
#include "src/report/explain.h"

namespace ddplab {

std::vector<CmpResult> cmp_models(const Module& a, const Module& b) {
  std::vector<CmpResult> rows;
  const auto pa = a.parameters(), pb = b.parameters();
  for (size_t i = 0; i < pa.size(); ++i) rows.push_back(cmp(pa[i]->name, pa[i]->data(), pb[i]->data(), pa[i]->numel()));
  const auto ba = a.buffers(), bb = b.buffers();
  for (size_t i = 0; i < ba.size(); ++i) {
    if (ba[i]->is_int64) {  // num_batches_tracked: a count, compared as one float
      const float x = static_cast<float>(ba[i]->count), y = static_cast<float>(bb[i]->count);
      rows.push_back(cmp(ba[i]->name, &x, &y, 1));
    } else {
      rows.push_back(cmp(ba[i]->name, ba[i]->value.data(), bb[i]->value.data(), ba[i]->value.size()));
    }
  }
  return rows;
}

namespace {

bool all_exact(const std::vector<CmpResult>& rows) {
  for (const CmpResult& r : rows) {
    if (!r.exact) return false;
  }
  return true;
}

std::string table(const std::vector<CmpResult>& rows) {
  std::string out;
  for (const CmpResult& r : rows) out += format_cmp(r) + "\n";
  return out;
}

bool power_of_two(int64_t n) { return n > 0 && (n & (n - 1)) == 0; }

}  // namespace

std::string buffers_why(const ddp::Config& cfg, bool buffers_equal) {
  if (!buffers_equal && !cfg.broadcast_buffers) {
    return "with --broadcast-buffers false each rank's\n"
           "BatchNorm running statistics average only the batches that rank saw. The parameters still agree (the\n"
           "all-reduce), but model.eval() then normalises with different statistics on every rank.\n";
  }
  if (!buffers_equal) {
    return "DDP broadcasts rank 0's buffers BEFORE each\n"
           "training forward, and each rank's last forward then updated its running statistics from its own batch.\n"
           "They agree again at the next forward through DDP (model.eval() included).\n";
  }
  if (cfg.sync_batchnorm && cfg.world_size > 1) {
    return "SyncBatchNorm updates every rank's running statistics\n"
           "from the same all-gathered statistics of all ranks' samples, merged in the same order: the same bits on "
           "every\nrank, whatever DDP's buffer broadcast does.\n";
  }
  if (cfg.broadcast_buffers) {
    return "broadcast_buffers=True (DDP's default): DDP gives every rank rank 0's\n"
           "buffers before each training forward, and again before the model.eval() forward: every rank holds\n"
           "rank 0's running statistics.\n";
  }
  return "with --broadcast-buffers false nothing synchronises the\n"
         "buffers, yet every rank's agree here: its batches gave the same running statistics.\n";
}

std::string report_tables(const ddp::Config& cfg, const ddp::SimResult& res) {
  std::string out;
  const Module& rank0 = res.replicas[0]->model;
  std::vector<int64_t> differing;
  bool parameters_equal = true;  // the rows before the buffers'
  const size_t num_params = rank0.parameters().size();
  for (size_t k = 1; k < res.replicas.size(); ++k) {
    const auto rows = cmp_models(res.replicas[k]->model, rank0);
    if (!all_exact(rows)) differing.push_back(static_cast<int64_t>(k));
    for (size_t i = 0; i < num_params; ++i) parameters_equal = parameters_equal && rows[i].exact;
    // Every rank's table would repeat itself: show the last rank's, and any rank that differs.
    if (k + 1 == res.replicas.size() || !all_exact(rows)) {
      out += fmt::format("# replica {} vs replica 0 after {} optimizer step{}\n{}", k, res.optimizer_steps,
                         res.optimizer_steps == 1 ? "" : "s", table(rows));
    }
  }
  if (cfg.world_size == 1) {
    out += "world_size 1: a single replica, nothing to compare.\n";
  } else if (differing.empty()) {
    const bool skipped = cfg.join && cfg.uneven > 0;  // a rank that ran out of batches skipped its last steps
    out += fmt::format(
        "all {} ranks hold bitwise identical parameters: they started equal\n({}), and every all-reduce "
        "hands every rank the very same averaged gradient,\n{}",
        cfg.world_size,
        cfg.hand_sync != ddp::HandSync::none ? "the script broadcast rank 0's parameters at the start, as DDP does"
        : cfg.broadcast                      ? "DDP broadcast rank 0's parameters at construction"
                      : "--init same: every rank drew the same initial weights",
        skipped ? "so every rank that stepped took the same step; the ranks that ran out of batches skipped their "
                  "last\nsteps (they answered the all-reduces with zeros under Join), and Join's end copied the "
                  "parameters\nof the rank that stepped last to them.\n"
                : "so every optimizer step is the same on every rank.\n");
  } else if (parameters_equal) {
    out += fmt::format("{} of {} ranks differ from rank 0, in their buffers only: {}", differing.size(),
                       cfg.world_size - 1, buffers_why(cfg, false));
  } else {
    out += fmt::format("{} of {} ranks differ from rank 0: {}\n", differing.size(), cfg.world_size - 1,
                       res.error
                           ? "training stopped on DDP's error (below): the step\nbefore it ran without its "
                             "all-reduce (its bucket waited for gradients that never came),\nso every rank "
                             "stepped with its own gradients."
                       : cfg.comm_hook.name == "noop"
                           ? "noop_hook sent nothing: every rank stepped with its own\ngradients, so the replicas "
                             "drift apart from the first step. Averaging the gradients is what\nkeeps DDP's "
                             "replicas equal."
                       : cfg.sync_on == ddp::SyncOn::never
                           ? "every micro-batch ran inside no_sync() (--sync-on never):\nnothing was all-reduced, "
                             "so every rank stepped with its own gradients and the replicas\ndrift apart. Run a "
                             "step's last micro-batch outside no_sync()."
                       : cfg.sync_on == ddp::SyncOn::first
                           ? "each step's all-reduce ran on its first micro-batch\n(--sync-on first): it averaged "
                             "only that micro-batch's gradients, and the later micro-batches\nadded each rank's own, "
                             "so the ranks stepped on different .grad. Run the last\nmicro-batch outside no_sync(), "
                             "the others inside it."
                       : res.nonfinite
                           ? fmt::format("the numbers became NaN or inf (step {}, rank {}: {} first),\nand NaN equals "
                                         "nothing, not even itself: {}",
                                         res.nonfinite->step, res.nonfinite->rank, res.nonfinite->what,
                                         cfg.inject_nan_rank >= 0
                                             ? "the all-reduce carried --inject-nan's NaN to every rank"
                                             : "the run diverged (an lr too large, say)")
                       : !cfg.broadcast && cfg.init == ddp::InitKind::per_rank
                           ? "they started from different weights (--init per-rank)\nand nothing made them "
                             "equal. DDP's broadcast of rank 0's parameters at construction\n(--broadcast true) "
                             "exists for exactly this."
                           : "unexpected: please report this configuration.");
  }
  if (res.single_device) {
    const auto rows = cmp_models(rank0, res.single_device->model);
    out += fmt::format("\n# DDP replica 0 vs one device trained on the union of the shards\n{}", table(rows));
    if (all_exact(rows) && cfg.world_size == 1) {
      out += "bitwise equal: at world_size 1 DDP adds nothing in another order (one rank's gradient times 1/1, no "
             "other rank to sum).\n";
    } else if (all_exact(rows)) {
      out += "bitwise equal: the different addition order happened to round the same way here.\n";
    } else if (cfg.model_spec().find("dropout") != std::string::npos) {
      out += fmt::format("different draws: Dropout draws each rank's masks from that rank's generator for its {} "
                         "samples, the one device\nits {} samples' masks at once. Expect approximate: False.\n",
                         cfg.batch_size, cfg.world_size * cfg.batch_size);
    } else if (cfg.model_spec().find("batchnorm") != std::string::npos && !cfg.sync_batchnorm) {
      out += fmt::format("different mathematics: BatchNorm normalises each rank's {} samples with their own mean and "
                         "variance, the one\ndevice its {} samples with theirs. Expect approximate: False; with "
                         "--sync-batchnorm true every rank\nnormalises with the statistics of all {} samples.\n",
                         cfg.batch_size, cfg.world_size * cfg.batch_size, cfg.world_size * cfg.batch_size);
    } else {
      if (cfg.sync_batchnorm) {
        out += fmt::format("SyncBatchNorm normalises with the mean and variance of all {} samples, as the one device "
                           "does, but merges\nthem from the ranks' own (all_gather, then Chan's formula in float) "
                           "where the one device sums once.\n",
                           cfg.world_size * cfg.batch_size);
      }
      out += fmt::format(
          "same mathematics, different float additions: one device takes the mean over {} samples in one\n"
          "matmul; DDP takes {} per-rank means, multiplies each by float(1/{}){},\n"
          "and sums them in the {} order. Expect exact: False, approximate: True.\n",
          cfg.world_size * cfg.batch_size, cfg.world_size, cfg.world_size,
          power_of_two(cfg.world_size) ? " (exact for a power of two)" : " (rounded: 1/3 is not a binary fraction)",
          collective::algorithm_name(cfg.allreduce));
      if (cfg.no_sync > 1) {  // the one device accumulates a step's micro-batches as the ranks do
        out += fmt::format("Under no_sync {0} both take those means for each of a step's {0} micro-batches and add "
                           "the {0} gradients\nin .grad the same way ({1}). Against one device at a {0} times larger "
                           "batch: ddp_questions accumulation.\n",
                           cfg.no_sync,
                           cfg.no_sync_loss == ddp::NoSyncLoss::sum ? "loss.backward() on each"
                                                                    : fmt::format("(loss / {}).backward()", cfg.no_sync));
      }
    }
  }
  if (!res.test_correct.empty()) {
    out += fmt::format("\n# test accuracy on the {} held-out digits (model.eval(): running statistics, no dropout)\n",
                       res.test_size);
    const auto pct = [&](int64_t c) { return 100.0 * static_cast<double>(c) / static_cast<double>(res.test_size); };
    for (size_t r = 0; r < res.test_correct.size(); ++r) {
      out += fmt::format("rank {}: {}/{} ({:.2f}%)\n", r, res.test_correct[r], res.test_size, pct(res.test_correct[r]));
    }
    if (res.single_device) {
      out += fmt::format("one device: {}/{} ({:.2f}%)\n", res.single_device_test_correct, res.test_size,
                         pct(res.single_device_test_correct));
    }
  }
  return out;
}

std::string dump_json(const DumpPieces& d) {
  std::string out = fmt::format("{{\"world_size\": {},\n", d.world_size);
  if (!d.backend.empty()) out += fmt::format(" \"backend\": \"{}\",\n", d.backend);
  std::vector<std::string> quoted;
  for (const std::string& a : d.args) quoted.push_back(json_string(a));
  out += fmt::format(" \"args\": [{}],\n \"replicas\": [\n  {}\n ],\n", fmt::join(quoted, ", "),
                     fmt::join(d.replicas, ",\n  "));
  out += fmt::format(" \"sampler_indices\": [{}],\n \"losses\": [{}]", fmt::join(d.epoch_indices, ", "),
                     fmt::join(d.losses, ", "));
  if (!d.buffers.empty()) out += fmt::format(",\n \"buffers\": [\n  {}\n ]", fmt::join(d.buffers, ",\n  "));
  if (!d.test_correct.empty()) out += fmt::format(",\n \"test_correct\": [{}]", fmt::join(d.test_correct, ", "));
  return out + "}\n";
}

std::string dump_json(const ddp::Config& cfg, const ddp::SimResult& res) {
  DumpPieces d;
  d.world_size = cfg.world_size;
  d.args = ddp::to_args(cfg);
  for (const auto& rep : res.replicas) {
    d.replicas.push_back(json_params(std::as_const(rep->model).parameters()));
    const auto buffers = std::as_const(rep->model).buffers();
    if (!buffers.empty()) d.buffers.push_back(json_buffers(buffers));
  }
  d.test_correct = res.test_correct;
  for (const auto& epoch : res.sampler_indices) {
    std::vector<std::string> ranks;
    for (const auto& idx : epoch) ranks.push_back(fmt::format("[{}]", fmt::join(idx, ", ")));
    d.epoch_indices.push_back(fmt::format("[{}]", fmt::join(ranks, ", ")));
  }
  for (int64_t r = 0; r < cfg.world_size; ++r) {
    std::vector<std::string> l;
    for (const ddp::BatchLog& b : res.log) {
      if (b.rank == r) l.push_back(json_float(b.loss));
    }
    d.losses.push_back(fmt::format("[{}]", fmt::join(l, ", ")));
  }
  return dump_json(d);
}

std::string explain_first_bucket(const ddp::Config& cfg, const std::vector<float*>& bufs, size_t n) {
  const char* how =
      cfg.average == ddp::Average::postdivide ? "raw gradients (postdivide)" : "gradients * float(1/world_size)";
  if (n <= 48) {  // small enough to show whole: the real bucket, chunked as the order chunks it
    std::vector<std::vector<float>> inputs;
    for (float* b : bufs) inputs.emplace_back(b, b + n);
    return fmt::format("the first all-reduce: iteration 0's single bucket, {}\n", how) +
           explain_allreduce(cfg.allreduce, "bucket 0 (every parameter, model order)", inputs);
  }
  // Too big to print: take the last layer's bias, which sits at the end of iteration 0's bucket, and run
  // the all-reduce on it alone, as if it were a bucket of its own (its chunking then differs from the real one).
  const auto [name, numel] = ddp::last_parameter(cfg);
  const auto last = static_cast<size_t>(numel);
  const size_t count = std::min<size_t>(last, 24);
  std::vector<std::vector<float>> inputs;
  for (float* b : bufs) inputs.emplace_back(b + n - last, b + n - last + count);
  return fmt::format("{} from the first all-reduce ({}), run through the all-reduce on its own as if it were a "
                     "bucket\n",
                     name, how) +
         explain_allreduce(cfg.allreduce, name, inputs);
}

}  // namespace ddplab
