// bazel run //notebooks_ported/006_tiny_gpt -- nanoGPT's tiny GPT under DDP (simulated or real ranks: lab::Group;
// src/gpt): the tied weight, unused parameters, gradient accumulation, clipping, gradient_as_bucket_view,
// seeding, and text sampled by every rank. Every number is torch 1.13 DDP's bit for bit (tests/gpt_ddp_test,
// gpt_sample_test); the "check:" lines are the claims, which reference.py beside this file prints from real
// torch DDP.
#include <algorithm>
#include <cstdio>
#include <optional>

#include <fmt/format.h>

#include "notebooks_ported/lab/group.h"
#include "notebooks_ported/lab/lab.h"
#include "notebooks_ported/lab/lab_report.h"
#include "src/base/compare.h"
#include "src/ddp/trainer.h"
#include "src/base/flags.h"
#include "src/report/gpt_output.h"
#include "src/gpt/sample.h"
#include "src/gpt/train.h"
#include "src/launch/runner.h"
#include "src/report/html_report.h"

namespace {

using namespace ddplab;
using namespace ddplab::gpt;

constexpr const char* kUsage = R"(usage: 006_tiny_gpt [flags]
nanoGPT's GPT (2 layers, 2 heads, n_embd 16, block 8, batch 4 per rank) on GPL-3's bytes under DDP: on
simulated ranks, or real ones (--backend gloo|nccl --nproc N; a part at another world size than N is simulated,
and says so). Defaults in brackets.
  ranks: --world-size N (sim) or --nproc N, 2..8 [2]
  --steps N        optimizer steps per run, 2..20 [4]     --seed S   torch.manual_seed [1337]
  --report FILE.html   (sim) what it printed, the loss per rank, the clip norms, the buckets
)";

RunConfig base_config(const Flags& flags) {
  RunConfig c = ddp::gpt_config();
  c.gpt.n_layer = 2;
  c.gpt.n_head = 2;
  c.gpt.n_embd = 16;
  c.gpt.block_size = 8;
  c.batch_size = 4;
  c.world_size = 2;
  c.steps = flags.get_int("steps", 4, 2, 20);
  c.seed = static_cast<uint64_t>(flags.get_int("seed", 1337, 0, INT64_MAX));
  c.lr = 1e-2;
  c.seed_per_rank = false;  // every rank seeds alike; section 6 shows nanoGPT's seed + rank beside it
  return c;
}

std::string floats(const std::vector<float>& v) {
  std::string s;
  for (float f : v) s += fmt::format("{}{:.9g}", s.empty() ? "" : " ", f);
  return s;
}

const Parameter& param(const GptRank& r, const std::string& name) {
  for (const Parameter* p : r.params) {
    if (p->name == name) return *p;
  }
  throw std::logic_error("no parameter " + name);
}

// The buckets, names in bucket order, buckets separated by " | " (reference.py prints torch's the same way).
std::string bucket_names(const ddp::Reducer& red, const std::vector<Parameter*>& params) {
  std::string s;
  for (size_t b = 0; b < red.num_buckets(); ++b) {
    if (b) s += " |";
    for (size_t i : red.bucket(b).params) s += (s.empty() ? "" : " ") + params[i]->name;
  }
  return s;
}

// torch 1.13's text for rank 0 with TORCH_DISTRIBUTED_DEBUG=DETAIL (measured by tests/golden/gpt/check_facts.py
// (a); note the trailing spaces torch leaves after "and by" and "calculating loss.").
std::string torch_unused_message(const UnfinishedReduction& e) {
  std::string idx, names;
  for (size_t i = 0; i < e.indices.size(); ++i) {
    idx += fmt::format("{}{}", i ? ", " : "", e.indices[i]);
    names += fmt::format("{}{}", i ? ", " : "", e.params[i]);
  }
  return "Expected to have finished reduction in the prior iteration before starting a new one. This error "
         "indicates that your module has parameters that were not used in producing loss. You can enable unused "
         "parameter detection by passing the keyword argument `find_unused_parameters=True` to "
         "`torch.nn.parallel.DistributedDataParallel`, and by \n"
         "making sure all `forward` function outputs participate in calculating loss. \n"
         "If you already have done the above, then the distributed data parallel module wasn't able to locate the "
         "output tensors in the return value of your module's `forward` function. Please include the loss "
         "function and the structure of the return value of `forward` of your module when reporting this issue "
         "(e.g. list, dict, iterable).\n"
         "Parameters which did not receive grad for rank 0: " +
         names + "\nParameter indices which did not receive grad for rank 0: " + idx;
}

std::string escaped(const std::string& s) {
  std::string o;
  for (char ch : s) o += ch == '\n' ? std::string("\\n") : std::string(1, ch);
  return o;
}

int body(const lab::Group& g, const RunConfig& cfg, const TextData& data, lab::LabReport& page) {
  const int64_t ws = cfg.world_size;
  g.say(fmt::format("Lab 006: nanoGPT's tiny GPT under DDP, {}\n{}\n", g.describe(ws), describe(cfg)));
  g.say(fmt::format("Sections 1-5 seed every rank alike (torch.manual_seed({}) everywhere, so every rank draws the same "
                    "batches);\nsection 6 sets that beside nanoGPT's seed + rank, where each rank draws its own.\n",
                    cfg.seed));

  // ---- 1. the tied weight
  g.say("\n# 1. One model, two uses: transformer.wte.weight IS lm_head.weight\n");
  const auto base = lab::train_gpt(g, cfg, data);
  const GptRank& r0 = base->own();  // the names and buckets are every rank's
  int wte = 0, lm_head = 0;
  for (const Parameter* p : r0.params) {
    wte += p->name == "transformer.wte.weight";
    lm_head += p->name == "lm_head.weight";
  }
  g.say(fmt::format("check: parameters(): {} tensors, transformer.wte.weight listed {}, lm_head.weight listed {}",
                  r0.params.size(), wte, lm_head));
  g.say("  one Parameter: the embedding looks rows up in it, the head multiplies by it; the state_dict still has\n"
      "  both keys. Its .grad sums both uses before DDP's hook fires, and the embedding's backward runs last.\n");
  g.say("buckets at iteration 0 (parameter order): " + report::short_names(base->simulated ? base->sim.buckets_first
                                                                                     : base->log.buckets_first));
  g.say("check: rebuilt buckets (gradient-ready order): " + bucket_names(*r0.reducer, r0.params));
  g.say("  wte.weight is last: its gradient is ready only after the embedding's backward, the last op of the\n"
      "  backward. (The whole model is one bucket: 1.13's first rebuilt bucket holds up to 1 MiB.)\n");

  // ---- 2. unused parameters
  g.say("\n# 2. Unused parameters: an aux head used on steps 0, 2, 4, ... (--aux-head-every 2)\n");
  RunConfig aux = cfg;
  aux.gpt.aux_head_every = 2;
  const auto err = lab::train_gpt(g, aux, data);
  if (const auto& e = err->error()) {
    g.say(fmt::format("check: find_unused_parameters=False: RuntimeError at step {} micro-step {}", e->step, e->micro));
    g.say("torch 1.13 raises, in the DDP forward of that step (TORCH_DISTRIBUTED_DEBUG=INFO or DETAIL names the "
          "parameter):");
    const std::string msg = torch_unused_message(*e);
    size_t start = 0;
    for (size_t nl; (nl = msg.find('\n', start)) != std::string::npos; start = nl + 1) {
      g.say("check: torch: " + msg.substr(start, nl - start));
    }
    g.say("check: torch: " + msg.substr(start));
    g.say("  step 1 left aux_head.weight without a grad, so its bucket never became ready and the reduction\n"
        "  never finished; DDP notices at the next forward.");
  }
  RunConfig fu = aux;
  fu.find_unused_parameters = true;
  for (bool none : {true, false}) {
    RunConfig one = fu, two = fu;
    one.zero_grad_set_to_none = two.zero_grad_set_to_none = none;
    one.steps = 1;
    two.steps = 2;
    // Rank 0's (this process's own where it says so).
    const auto a = lab::train_gpt(g, one, data), b = lab::train_gpt(g, two, data);
    const Parameter &before = param(a->own(), "aux_head.weight"), &after = param(b->own(), "aux_head.weight");
    const CmpResult c = cmp("aux_head.weight", after.data(), before.data(), after.numel());
    int64_t moved = 0;
    for (int64_t i = 0; i < after.numel(); ++i) moved += after.data()[i] != before.data()[i];
    g.say(
        fmt::format("check: find_unused_parameters=True zero_grad(set_to_none={}): step 1: aux_head.weight.grad {}, "
                    "unchanged by optimizer.step: {}",
                    none ? "True" : "False", after.has_grad ? "zeros" : "None", moved == 0 ? "True" : "False"));
    g.say(fmt::format("  aux_head.weight[0, :3] after step 0: {} | after step 1: {} | {} of {} values moved, maxdiff {}",
                    floats({before.data()[0], before.data()[1], before.data()[2]}),
                    floats({after.data()[0], after.data()[1], after.data()[2]}), moved, after.numel(),
                    python_float_repr(c.maxdiff)));
  }
  g.say("  set_to_none=True (nanoGPT's, 2.x's default): the grad stays None and AdamW skips the parameter, no decay.\n"
      "  set_to_none=False (1.13's default): the grad is zeros, and AdamW still decays the weight and moves it by\n"
      "  the moments of step 0.\n");

  // ---- 3. gradient accumulation
  g.say("\n# 3. Gradient accumulation: --no-sync 2 (model.no_sync() on every micro-step but the last, loss / 2)\n");
  RunConfig acc = cfg;
  acc.no_sync = 2;
  acc.steps = 3;
  const auto ac = lab::train_gpt(g, acc, data);
  g.say(fmt::format("check: no_sync 2, {} steps: {} micro-steps per rank, {} all-reduces", acc.steps,
                    acc.steps * acc.no_sync, ac->allreduces));
  for (int64_t r = 0; r < ws; ++r) {
    g.say(fmt::format("check: no_sync 2 losses rank {}: {}", r, floats(ac->ranks[size_t(r)].losses)));
  }
  g.say("  the all-reduce runs only in the backward of the last micro-step; the earlier ones add into .grad\n"
      "  locally. Each micro-loss is divided by 2 before backward, so the sum is the mean of the micro-batches.\n");

  // ---- 4. clipping after the all-reduce
  g.say("\n# 4. clip_grad_norm_(model.parameters(), 1.0) after the all-reduce\n");
  RunConfig clip = cfg;
  clip.clip_grad_norm = 1.0;
  const auto cl = lab::train_gpt(g, clip, data);
  bool alike = true;
  for (int64_t r = 0; r < ws; ++r) {
    g.say(fmt::format("check: clip_grad_norm_ total norm rank {}: {}", r, floats(cl->ranks[size_t(r)].clip_norms)));
    alike = alike && cl->ranks[size_t(r)].clip_norms == cl->ranks[0].clip_norms;
  }
  g.say(
      fmt::format("  every rank computed the same total norm: {} (the grads are already averaged, so each rank\n"
                  "  clips the same gradient by the same factor and the replicas stay equal)",
                  alike ? "True" : "False"));

  // ---- 5. gradient_as_bucket_view
  g.say("\n# 5. gradient_as_bucket_view with zero_grad(set_to_none=False): True vs False\n");
  for (int64_t w : {int64_t{3}, int64_t{2}}) {
    RunConfig f = cfg, t = cfg;
    f.world_size = t.world_size = w;
    f.zero_grad_set_to_none = t.zero_grad_set_to_none = false;
    t.gradient_as_bucket_view = true;
    if (const std::string note = g.simulated_note(w); !note.empty()) g.say(note);
    const auto a = lab::train_gpt(g, t, data), b = lab::train_gpt(g, f, data);
    const std::vector<float> va = lab::parameter_values(a->ranks[0]), vb = lab::parameter_values(b->ranks[0]);
    int64_t differ = 0;
    for (size_t i = 0; i < va.size(); ++i) differ += va[i] != vb[i];
    g.say(fmt::format("check: ws {} zero_grad zeros: gradient_as_bucket_view True vs False: {} of {} values differ", w,
                    differ, va.size()));
    const std::vector<CmpResult> rows = lab::cmp_states(a->ranks[0], b->ranks[0]);
    std::string table;
    for (const CmpResult& r : rows) table += report::short_names(format_cmp(r)) + "\n";
    if (w == 3) g.say(table);
    lab::record_table(fmt::format("ws {}: gradient_as_bucket_view True vs False, zero_grad zeros", w), rows);
  }
  g.say("  once the grads alias the bucket, 1.13's Reducer divides the bucket by the world size instead of\n"
      "  multiplying by 1/world_size: 1/3 is not exact in float, 1/2 is, so only ws 3 moves bits.\n");

  // ---- 6. seeding
  g.say("\n# 6. Seeding: torch.manual_seed(seed) on every rank vs nanoGPT's seed + rank\n");
  for (bool per_rank : {false, true}) {
    RunConfig s = cfg;
    s.seed_per_rank = per_rank;
    const auto lines = g.each_rank(ws, [&](int64_t r) {
      GptRank rk(s, data, r);  // the seed, then the model: the first batch is the next draw
      Generator peek = rk.gen;
      const auto ix =
          peek.randint(static_cast<int64_t>(data.tokens(Split::kTrain).size()) - s.gpt.block_size, s.batch_size);
      return fmt::format("check: {} rank {} first batch ix: {}", per_rank ? "seed + rank" : "seed alike", r,
                         fmt::join(ix, " "));
    });
    for (const std::string& l : lines) g.say(l);
  }
  g.say("  seeded alike, every rank trains on the same batches: DDP then averages identical gradients, and\n"
      "  the world size buys nothing. nanoGPT seeds 1337 + rank so that each rank draws its own.\n");

  // ---- 7. sampling
  g.say("\n# 7. Every rank samples from its model with its own generator (nanoGPT's generate, top_k none)\n");
  RunConfig pr = cfg;
  pr.seed_per_rank = true;
  const auto per = lab::train_gpt(g, pr, data);
  SampleOptions so;
  so.max_new_tokens = 40;
  const std::vector<int64_t> prompt = data.encode("\n");
  for (lab::TrainedGpt* run : {base.get(), per.get()}) {
    const bool alike_run = run != per.get();
    const auto lines = g.each_rank(ws, [&](int64_t r) {  // each rank samples from its own model and generator
      GptRank& rk = run->rank(r);
      return fmt::format("check: sample {} rank {}: {}", alike_run ? "seed alike" : "seed + rank", r,
                         escaped(data.decode(generate(rk.model, prompt, 1, so, rk.gen))));
    });
    for (const std::string& l : lines) g.say(l);
    const std::vector<float> v0 = lab::parameter_values(run->ranks[0]);
    bool same_w = true;
    for (int64_t r = 1; r < ws; ++r) same_w = same_w && lab::parameter_values(run->ranks[size_t(r)]) == v0;
    g.say(fmt::format("  weights equal on every rank: {}", same_w ? "True" : "False"));
  }
  g.say("  one model on every rank (DDP keeps the weights equal); the text differs only where the generators do.\n");

  if (page.active()) {
    report::ReportData& d = *page.data();
    d.config = describe(cfg);
    d.loss_x_label = "step";
    for (int64_t r = 0; r < ws; ++r) {
      d.losses.push_back(report::loss_series(fmt::format("loss, rank {}", r), base->ranks[size_t(r)].losses));
    }
    for (int64_t r = 0; r < ws; ++r) {
      svg::Series s =
          report::loss_series(fmt::format("clip_grad_norm_ total, rank {}", r), cl->ranks[size_t(r)].clip_norms);
      s.dashed = true;
      d.losses.push_back(s);
    }
    const auto layout = [&](const std::string& title, const std::vector<std::vector<size_t>>& buckets) {
      report::BucketLayout l{title, {}};
      for (const auto& b : buckets) {
        report::Bucket out;
        for (size_t i : b) {
          out.params.push_back(report::short_names(r0.params[i]->name));
          out.numels.push_back(r0.params[i]->numel());
          out.numel += r0.params[i]->numel();
        }
        l.buckets.push_back(out);
      }
      return l;
    };
    std::vector<size_t> all(r0.params.size());
    for (size_t i = 0; i < all.size(); ++i) all[i] = i;
    d.layouts.push_back(layout("iteration 0: parameter order (one bucket: the model is far below 25 MiB)", {all}));
    std::vector<std::vector<size_t>> rebuilt;
    for (size_t b = 0; b < r0.reducer->num_buckets(); ++b) rebuilt.push_back(r0.reducer->bucket(b).params);
    d.layouts.push_back(layout("from iteration 1: rebuilt in gradient-ready order (wte.weight last)", rebuilt));
    d.notes.push_back(
        "The dashed series are clip_grad_norm_'s total norm per rank (section 4's run), the solid "
        "ones the loss per rank (section 1's run).");
  }
  return 0;
}

int run(int argc, char** argv) {
  std::optional<TextData> data;  // read once, with the configuration: its vocabulary sizes the model
  return lab::run_group_lab(
      argc, argv, {"steps", "seed"}, kUsage,
      [&](const Flags& flags) {
        RunConfig cfg = base_config(flags);
        data = TextData::load(cfg.data);
        cfg.gpt.vocab_size = data->vocab_size();
        return cfg;
      },
      [&](lab::Group& g, const RunConfig& cfg, lab::LabReport& page) { return body(g, cfg, *data, page); });
}

}  // namespace

int main(int argc, char** argv) { return ddplab::guarded_main("006_tiny_gpt", argc, argv, run); }
