// The run's health, beyond DDP's arithmetic: NaN and infinities (where they first appear, on which rank, in
// which tensor, and why), the parameters DDP does not reduce that the run changed anyway, .grad carried from
// one step into the next, and backwards whose forward did not go through DDP. Each is a mistake whose numbers
// DDP's replay predicts perfectly: the arithmetic holds, the run is still wrong.
#include "src/check/findings/health.h"

#include <algorithm>
#include <cmath>

#include <fmt/format.h>

#include "src/check/replay/step_compare.h"

namespace ddplab::check {
namespace {

// The kinds of tensor the recorder flags as not finite, in the order a step meets them.
constexpr const char* kStages[] = {"param_before", "input", "local", "grad", "grad_step", "param_after"};

std::string ranks_text(const std::vector<int>& ranks, int ws) {
  if (static_cast<int>(ranks.size()) == ws) return ws == 2 ? "both ranks" : fmt::format("all {} ranks", ws);
  std::string s = ranks.size() == 1 ? "rank " : "ranks ";
  for (size_t i = 0; i < ranks.size(); ++i) s += (i ? i + 1 == ranks.size() ? " and " : ", " : "") + std::to_string(ranks[i]);
  return s;
}

// Which tensors of a record hold a NaN or an infinity: as the recorder noted them, or, in a trace from before
// it did, as the values the record holds show.
std::map<std::string, std::vector<std::string>> nonfinite_of(const StepRecord& rec) {
  if (rec.nonfinite_recorded) return rec.nonfinite;
  std::map<std::string, std::vector<std::string>> out;
  for (const auto& [key, t] : rec.tensors) {
    const size_t slash = key.find('/');
    const std::string kind = key.substr(0, slash);
    if (std::find(std::begin(kStages), std::end(kStages), kind) == std::end(kStages)) continue;
    if (std::any_of(t.data.begin(), t.data.end(), [](float x) { return !std::isfinite(x); }))
      out[kind].push_back(key.substr(slash + 1));
  }
  return out;
}

}  // namespace

Health::Health(const Run& run) : run_(run), outside_first_(static_cast<size_t>(run.world_size())) {}

void Health::step(const std::vector<const StepRecord*>& recs, const std::vector<const StepRecord*>& prev,
                  Findings& found) {
  const int ws = run_.world_size();
  const Manifest& m = run_.first();
  const StepRecord* ref = nullptr;
  for (const StepRecord* r : recs) ref = ref ? ref : r;
  if (!ref) return;
  const int64_t step = ref->step;

  // NaN and infinities: the first stage of the first step that holds one, on the lowest rank.
  std::vector<std::map<std::string, std::vector<std::string>>> nf(recs.size());
  std::vector<int> bad_after;
  for (size_t r = 0; r < recs.size(); ++r) {
    if (!recs[r]) continue;
    nf[r] = nonfinite_of(*recs[r]);
    if (nf[r].count("param_after") || nf[r].count("param_before")) bad_after.push_back(recs[r]->rank);
  }
  if (first_.step < 0) {
    for (const char* stage : kStages) {
      for (size_t r = 0; r < recs.size(); ++r) {
        auto it = nf[r].find(stage);
        if (it == nf[r].end() || it->second.empty()) continue;
        first_ = {step, recs[r]->rank, stage, it->second.front(), prev[r] == nullptr};
        for (size_t o = 0; o < recs.size(); ++o)
          if (nf[o].count(stage)) first_ranks_.push_back(recs[o]->rank);
        break;
      }
      if (first_.step >= 0) break;
    }
  }
  // Each rank's first recorded step: a parameter holding values no initialiser draws (and how many are all zeros).
  for (size_t r = 0; r < recs.size() && huge_.step < 0; ++r) {
    if (!recs[r] || prev[r]) continue;
    Huge h;
    for (const TensorInfo& p : m.params) {
      const safetensors::Tensor* t = recs[r]->find("param_before", p.name);
      if (!t || t->data.empty()) continue;
      double most = 0;
      for (const float v : t->data)
        if (std::isfinite(v)) most = std::max(most, static_cast<double>(std::fabs(v)));
      if (most > 1e30 && most > h.value) h = {step, recs[r]->rank, p.name, most, 0};
      h.zero_params += all_zero(t->data);
    }
    if (h.step >= 0) huge_ = h;
  }
  if (!bad_after.empty() && bad_params_step_ < 0) bad_params_step_ = step, bad_params_ranks_ = bad_after;
  if (static_cast<int>(bad_after.size()) == ws && all_bad_step_ < 0) all_bad_step_ = step;

  // .grad carried into the step: the optimizer's parameters' .grad was not cleared since the last step.
  if (!m.fsdp.present && grads_not_cleared_step_ < 0) {
    std::vector<int> carried;
    std::string first;
    for (const StepRecord* rec : recs) {
      // Its first recorded step has no "last step"; a zero_grad() between two of the record's backwards (a GAN's
      // generator pass through the discriminator, then netD.zero_grad()) cleared what was carried.
      if (!rec || !prev[static_cast<size_t>(rec->rank)] || !rec->zero_grads.empty()) continue;
      for (size_t i = 0; i < m.params.size(); ++i) {
        if (std::find(m.missing_params.begin(), m.missing_params.end(), i) != m.missing_params.end()) continue;
        const safetensors::Tensor* p = rec->find("prior", m.params[i].name);
        // A whole-run step keeps a digest of a prior .grad that is not all zeros (zeros are named, elided).
        if ((p && !all_zero(p->data)) || (!p && rec->crc32.count("prior/" + m.params[i].name))) {
          carried.push_back(rec->rank);
          if (first.empty()) first = m.params[i].name;
          break;
        }
      }
    }
    if (!carried.empty()) {
      grads_not_cleared_step_ = step;
      found.add("grads-not-cleared", "problem", "", step, static_cast<int>(carried.size()) == ws ? -1 : carried[0], first,
                fmt::format("step {}: when the step's backward began on {}, .grad still held what earlier steps left "
                            "('{}' first): optimizer.zero_grad() was not called between the steps, so each step's gradient "
                            "is DDP's average plus every earlier step's, and the optimizer counts old gradients again "
                            "and again. Call optimizer.zero_grad() once per step, before backward",
                            step, ranks_text(carried, ws), first));
    }
  }

  // Backwards whose forward did not go through DDP: nothing was all-reduced, whatever the other ranks did. Said
  // once for every rank where every rank did it.
  for (const char* via : {"module", "none"}) {
    std::vector<int> ranks;
    size_t k_first = 0;
    for (const StepRecord* rec : recs) {
      if (!rec) continue;
      for (size_t k = 0; k < rec->backwards.size(); ++k)
        if (rec->backwards[k].forward == via) {
          if (ranks.empty()) k_first = k;
          ranks.push_back(rec->rank);
          break;
        }
    }
    if (ranks.empty()) continue;
    const bool all = static_cast<int>(ranks.size()) == ws;
    const std::string who = ranks_text(ranks, ws);
    for (int r : all ? std::vector<int>{-1} : ranks) {
      if (std::string(via) == "module")
        found.add("not-all-reduced", "problem", "module-call", step, r, "",
                  fmt::format("step {}: on {}, backward {} followed a forward of ddp_model.module(x), the wrapped "
                              "model, not of ddp_model(x): DDP arms its all-reduce in its own forward, so that backward "
                              "reduced nothing and {} kept {} own gradient{}. Call the DDP model "
                              "(ddp_model(x)) for every training forward; the wrapped module is for saving "
                              "(ddp_model.module.state_dict()) and evaluation",
                              step, who, k_first, ranks.size() == 1 ? "it" : "each rank", "its",
                              all ? "" : "; the other ranks' all-reduces then pair with another step's"));
      else
        found.add("not-all-reduced", "problem", "second-backward", step, r, "",
                  fmt::format("step {}: on {}, backward {} ran with no forward since the last one "
                              "(backward(retain_graph=True), then backward again on the same graph): DDP all-reduces "
                              "the first backward after each forward only, so this one added each rank's own gradient "
                              "to the averaged .grad, and the replicas step apart. Add the losses and call backward "
                              "once, or run a forward through ddp_model before each backward",
                              step, who, k_first));
      if (!all) break;  // one finding for the step, at the first rank; the message names the others
    }
  }

  // The parameters DDP does not reduce: changed (against the rank's first recorded digest), and the ranks' bits.
  outside_equal_ = true;
  for (const OutsideParam& o : m.outside_params) {
    const std::string& name = o.info.name;
    std::vector<int> changed;
    const StepRecord* base = nullptr;
    double maxdiff = 0;
    bool differ = false;
    int differ_rank = -1;
    for (const StepRecord* rec : recs) {
      if (!rec) continue;
      auto it = rec->outside.find(name);
      if (it == rec->outside.end()) continue;
      auto& first = outside_first_[static_cast<size_t>(rec->rank)];
      if (!first.count(name)) {  // where the rank's own manifest says it started, else its first recorded step
        first[name] = it->second;
        for (const OutsideParam& mine : run_.ranks[static_cast<size_t>(rec->rank)].outside_params)
          if (mine.info.name == name && mine.initial >= 0) first[name] = static_cast<uint32_t>(mine.initial);
      }
      if (first[name] != it->second) changed.push_back(rec->rank);
      if (!base) {
        base = rec;
        continue;
      }
      if (base->outside.at(name) == it->second) continue;
      differ = true;
      if (differ_rank < 0) differ_rank = rec->rank;
      const safetensors::Tensor* a = rec->find("outside", name);
      const safetensors::Tensor* b = base->find("outside", name);
      if (a && b && a->data.size() == b->data.size())
        for (size_t k = 0; k < a->data.size(); ++k) maxdiff = std::max(maxdiff, std::abs(double(a->data[k]) - b->data[k]));
    }
    if (differ) outside_equal_ = false;
    Outside& seen = outside_[name];
    if (!changed.empty() && seen.changed_step < 0) seen.changed_step = step, seen.changed_ranks = changed;
    if (differ && seen.differ_step < 0) seen.differ_step = step, seen.differ_rank = differ_rank, seen.base_rank = base->rank;
    if (differ) seen.last_diff_step = step, seen.maxdiff = maxdiff;
  }
}

void Health::after_run(Findings& found) {
  const Manifest& m = run_.first();
  const int ws = run_.world_size();

  // A NaN seen only at a step the trace did not record (every=K): the manifest's first.
  NonfiniteFirst unrecorded;
  int unrecorded_rank = -1;
  for (const Manifest& rm : run_.ranks)
    if (rm.nonfinite_first.step >= 0 && (unrecorded.step < 0 || rm.nonfinite_first.step < unrecorded.step))
      unrecorded = rm.nonfinite_first, unrecorded_rank = rm.rank;
  if (unrecorded.step >= 0 && (first_.step < 0 || unrecorded.step < first_.step)) {
    // Parameters after a step not recorded (every=K): the run trains on NaN. Anything else the recorder saw in a
    // step whose file was never written (the run ended before its optimizer.step()): said, not judged.
    const bool param = unrecorded.kind == "param_after" || unrecorded.kind == "param_before";
    found.add("nonfinite", param ? "problem" : "note", "unrecorded-step", unrecorded.step, unrecorded_rank,
              unrecorded.kind == "input" ? "" : unrecorded.name,
              param ? fmt::format("step {}, rank {}: '{}' holds NaN or inf after optimizer.step(), at a step the trace "
                                  "did not record (every={}): the run trains on NaN from there. Record every step "
                                  "(every=1) to see where it came from",
                                  unrecorded.step, unrecorded_rank, unrecorded.name, m.every)
                    : fmt::format("step {}, rank {}: the recorder saw NaN or inf in {} '{}' of a step whose record was "
                                  "never written (the run ended before that step's optimizer.step())",
                                  unrecorded.step, unrecorded_rank, unrecorded.kind, unrecorded.name));
  } else if (first_.step >= 0) {
    const bool trained_on =
        bad_params_step_ >= 0 || (unrecorded.step >= 0 && (unrecorded.kind == "param_after" || unrecorded.kind == "param_before"));
    const std::string who = ranks_text(first_ranks_, ws);
    const std::string& n = first_.name;
    std::string cause, what;
    if (first_.stage == "param_before" && first_.at_start) {
      cause = "uninitialised";
      what = fmt::format("'{}' holds NaN or inf on {} before the first recorded step: a parameter never initialised "
                         "(nn.Parameter(torch.empty(...)) or torch.Tensor(n) without an init_ call; its memory is "
                         "whatever was there), or a checkpoint that holds NaN. Every gradient through it is NaN",
                         n, who);
    } else if (first_.stage == "param_before") {
      cause = "parameter";
      what = fmt::format("'{}' became NaN or inf on {} between the last step and this one, outside optimizer.step() "
                         "(code that edits parameters, a load)", n, who);
    } else if (first_.stage == "input") {
      cause = "input";
      what = fmt::format("the batch fed to forward {} on {} holds NaN or inf: a corrupt sample, or preprocessing that "
                         "divides by zero (normalising by a zero std). Its loss and its local gradients are NaN, and "
                         "DDP's all-reduce adds them into every rank's gradient", n, who);
    } else if (huge_.step >= 0 && huge_.step <= first_.step && first_.stage != "input") {
      cause = "uninitialised";
      what = fmt::format("{} '{}' holds NaN or inf on {}, and at step {} '{}' on rank {} held values up to {:.3g}, far "
                         "beyond anything an initialiser draws{}: parameters never initialised (model.to_empty() or "
                         "torch.empty(...) without an init_ call, or reset_parameters() not run; their memory is "
                         "whatever was there). The forward overflows from there",
                         first_.stage == "local" ? "the local gradient" : "the tensor (" + first_.stage + ")",
                         first_.stage == "local" ? n.substr(n.find('/') + 1) : n, who, huge_.step, huge_.name,
                         huge_.rank, huge_.value,
                         huge_.zero_params ? fmt::format(" ({} of the rank's parameters held only zeros)", huge_.zero_params)
                                           : std::string());
    } else if (first_.stage == "local") {
      cause = "overflow";
      what = fmt::format("the local gradient '{}' on {} holds NaN or inf although the rank's input and parameters "
                         "were finite: its forward or backward overflowed float32 (a value past 3.4e38: exp of a "
                         "large logit, weights grown huge under an lr far too large) or computed log(0), 0/0 or sqrt of "
                         "a negative. DDP's all-reduce then adds it into every rank's gradient", n.substr(n.find('/') + 1), who);
    } else if (first_.stage == "grad") {
      cause = "all-reduce";
      what = fmt::format("every rank's local gradient was finite, but '{}'.grad after DDP's all-reduce is not (on {}): "
                         "the sum overflowed (float32's largest value is 3.4e38; under an fp16 compression hook "
                         "float16's, 65504)", n, who);
    } else if (first_.stage == "grad_step") {
      cause = "changed-before-step";
      what = fmt::format("'{}'.grad was finite after DDP's backward but not at optimizer.step() (on {}): code between "
                         "backward and step made it so (a division by a zero norm, a rescale)", n, who);
    } else {
      cause = "step-overflow";
      what = fmt::format("every gradient the optimizer saw was finite, but '{}' holds NaN or inf after "
                         "optimizer.step() (on {}): the update overflowed float32 (an lr or a gradient far too large: "
                         "the parameters grew past 3.4e38)", n, who);
    }
    std::string then;
    if (!trained_on)
      then = ". The parameters stayed finite: the step was skipped on every rank alike, so the run is not training "
             "on NaN";
    else if (all_bad_step_ >= 0)
      then = fmt::format(". From step {} every rank's parameters hold NaN or inf: every later step trains on NaN, and "
                         "the loss is NaN from there", all_bad_step_);
    else if (bad_params_step_ >= 0)
      then = fmt::format(". From step {} the parameters of {} hold NaN or inf while the others' stay finite",
                         bad_params_step_, ranks_text(bad_params_ranks_, ws));
    found.add("nonfinite", trained_on ? "problem" : "note", cause, first_.step, first_.rank,
              first_.stage == "input" ? "" : (first_.stage == "local" ? n.substr(n.find('/') + 1) : n),
              fmt::format("step {}: {}{}", first_.step, what, then));
  }

  // Values no initialiser draws, though nothing became NaN (a saturating layer after them: tanh(inf) is 1).
  if (huge_.step >= 0 && first_.step < 0 && unrecorded.step < 0)
    found.add("uninitialised-parameters", "problem", "", huge_.step, huge_.rank, huge_.name,
              fmt::format("step {}, rank {}: '{}' holds values up to {:.3g}, far beyond anything an initialiser draws{}: "
                          "parameters never initialised (model.to_empty() or torch.empty(...) without an init_ call, or "
                          "reset_parameters() not run; their memory is whatever was there). Nothing became NaN, but "
                          "what passes through them saturates or overflows",
                          huge_.step, huge_.rank, huge_.name, huge_.value,
                          huge_.zero_params ? fmt::format(" ({} of the rank's parameters held only zeros)", huge_.zero_params)
                                            : std::string()));

  // The parameters DDP does not reduce, changed during the run.
  for (const OutsideParam& o : m.outside_params) {
    auto it = outside_.find(o.info.name);
    if (it == outside_.end() || it->second.changed_step < 0) continue;
    const Outside& s = it->second;
    const std::string why = o.why == "parameters_to_ignore"
                                ? "DDP was told to ignore it (_ddp_params_and_buffers_to_ignore)"
                            : o.why == "added-after-ddp"
                                ? "it was added to the module after DDP(...) was built, and DDP's reducer keeps the "
                                  "parameters it found then, for good"
                                : "its requires_grad was False when DDP(...) was built, and DDP's reducer keeps the "
                                  "parameters that required grad then, for good: unfreezing it later does not make DDP "
                                  "all-reduce it";
    if (s.differ_step >= 0) {
      found.add("not-reduced-by-ddp", "problem", o.why, s.changed_step, s.differ_rank, o.info.name,
                fmt::format("step {}: '{}' is not one of DDP's parameters ({}), yet it changed from step {} on ({}): "
                            "each rank trains it on its own gradient, and the replicas drift apart (at step {}, rank "
                            "{}'s differs from rank {}'s by up to {:.3g}). {}",
                            s.changed_step, o.info.name, why, s.changed_step, ranks_text(s.changed_ranks, ws),
                            s.last_diff_step, s.differ_rank, s.base_rank, s.maxdiff,
                            o.why == "added-after-ddp"
                                ? "Build the whole model first, then wrap it: DDP(model)"
                            : o.why == "frozen"
                                ? "Set requires_grad before DDP(model) and freeze by leaving it out of the optimizer, "
                                  "or build a new DDP(model) after unfreezing"
                                : "Leave it out of the optimizer, or all-reduce it yourself"));
    } else {
      found.add("not-reduced-by-ddp", "note", o.why, s.changed_step, -1, o.info.name,
                fmt::format("step {}: '{}' is not one of DDP's parameters ({}), yet it changed, equally on every rank "
                            "at every recorded step: something other than DDP keeps it in step (a broadcast, the same "
                            "update everywhere)",
                            s.changed_step, o.info.name, why));
    }
  }
}

}  // namespace ddplab::check
