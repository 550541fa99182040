// The findings that need no step (what the recorder could not record, ranks that stopped, the comm hook's limits),
// the traced optimizer's coverage of DDP's parameters, and what the run did as a whole (averagings, training nothing).
#include <fmt/format.h>

#include "src/check/findings/findings.h"
#include "src/check/replay/replay.h"

namespace ddplab::check {

// The findings that need no step: what the recorder could not record, the optimizer's parameters, ranks
// whose recording stopped or that did not reach close(), and the comm hook's limits.
void run_findings(const Run& run, const GradReplay& replay, Findings& found) {
  const Manifest& m = run.first();
  if (!m.unchecked_params.empty()) {
    std::string names;
    for (const UncheckedParam& u : m.unchecked_params)
      names += fmt::format("{}'{}' ({}, {})", names.empty() ? "" : ", ", u.name, u.dtype, u.why);
    found.add("not-checked", "note", "params", -1, -1, m.unchecked_params[0].name,
              fmt::format("{} not checked: the recorder keeps float32 parameters with dense gradients only; every "
                          "other parameter, the replicas and the data are checked",
                          names));
  }
  std::vector<const Manifest*> no_close;  // close() never called: one note for all of them
  for (const Manifest& rm : run.ranks) {
    if (rm.stopped_step >= 0)
      found.add("recording-stopped", "note", "", rm.stopped_step, rm.rank, "",
                fmt::format("rank {}'s recorder stopped at step {}: {}. The training went on; steps after it are not "
                            "checked on that rank",
                            rm.rank, rm.stopped_step, rm.stopped_why));
    else if (!rm.complete && rm.closed_at_exit && rm.exit_error.empty())
      no_close.push_back(&rm);
    else if (!rm.complete && rm.closed_at_exit)
      found.add("recording-stopped", "note", "incomplete", rm.steps.empty() ? -1 : rm.steps.back(), rm.rank, "",
                fmt::format("rank {} ended by an error before DDPTrace.close() ({}): its trace ends {} (the recorder "
                            "finished it as the process exited)",
                            rm.rank, rm.exit_error,
                            rm.steps.empty() ? "before its first step" : fmt::format("at step {}", rm.steps.back())));
    else if (!rm.complete)
      found.add("recording-stopped", "note", "incomplete", rm.steps.empty() ? -1 : rm.steps.back(), rm.rank, "",
                fmt::format("rank {} did not reach DDPTrace.close() (the run ended there by an error, a signal or a "
                            "hang): its trace ends {}",
                            rm.rank, rm.steps.empty() ? "before its first step" : fmt::format("at step {}", rm.steps.back())));
  }
  if (!no_close.empty()) {
    const Manifest& rm = *no_close.front();
    std::string ranks;
    for (const Manifest* x : no_close) ranks += (ranks.empty() ? "" : ", ") + std::to_string(x->rank);
    found.add("recording-stopped", "note", "no-close", rm.steps.empty() ? -1 : rm.steps.back(),
              no_close.size() == 1 ? rm.rank : -1, "",
              fmt::format("trace.close() was never called (rank{} {}): the recorder finished the trace when the "
                          "process exited, {} (every step recorded is checked; had the script ended by an error, the "
                          "trace would end there too). Call trace.close() after the training loop: it also measures "
                          "the all-reduce's order where the backend's is not known",
                          no_close.size() == 1 ? "" : "s", ranks,
                          rm.steps.empty() ? "before its first step" : fmt::format("at step {}", rm.steps.back())));
  }
  if (m.optimizer_class == "LBFGS")
    found.add("not-checked", "note", "closure", -1, -1, "",
              "DDP's gradients are not predicted: LBFGS calls its closure several times per step and the closure "
              "zeroes .grad between the backwards, while the recorder reads .grad once, when the step's first backward "
              "starts; the replicas and the data are checked");
  if (!replay.grads_checked() && m.fsdp.present)
    found.add("not-checked", "note", "fsdp", -1, -1, "",
              "FSDP's sharded gradients are not predicted: " + replay.grads_why() +
                  "; the optimizer step on each rank's shards and the data are checked");
  else if (!replay.grads_checked())
    found.add("not-checked", "note", "comm-hook", -1, -1, "",
              "DDP's gradients are not predicted: " + replay.grads_why() +
                  ". torch ships this hook, so it is trusted; the replicas, the optimizer step and the data are checked");
  if (m.ddp.comm_hook == "noop")
    found.add("not-checked", "note", "noop-hook", -1, -1, "",
              "noop_hook all-reduces nothing: each rank steps with its own gradient and the replicas drift apart by "
              "design (torch ships it to measure what communication costs); the replicas are not compared");
}

// DDP's parameters the traced optimizer does not hold: a mistake when nothing else changes them either (an
// optimizer over copy.deepcopy(model)); a second optimizer that steps them is a design, said as a note.
// `changed` says whether each missing parameter (manifest order of missing_params) changed over the run.
void optimizer_findings(const Manifest& m, const std::vector<bool>& changed, Findings& found) {
  size_t moved = 0;
  for (bool c : changed) moved += c;
  if (moved > 0) {
    found.add("not-checked", "note", "other-optimizer", -1, -1, m.params[m.missing_params[0]].name,
              fmt::format("{} of DDP's parameters are not in the traced optimizer ({}) but changed during the run "
                          "(first '{}'): another optimizer steps them; they are checked as DDP reduces them, not stepped",
                          m.missing_params.size(), m.optimizer_class, m.params[m.missing_params[0]].name));
    return;
  }
  const size_t held = m.params.size() - m.missing_params.size();
  if (!m.missing_params.empty() || !m.missing_unchecked.empty()) {
    const bool none = held == 0 && m.missing_unchecked.size() == m.unchecked_params.size();
    const std::string first = !m.missing_params.empty() ? m.params[m.missing_params[0]].name : m.missing_unchecked[0];
    const size_t missing = m.missing_params.size() + m.missing_unchecked.size();
    if (none && m.fsdp.present) {
      found.add("optimizer-misses-parameters", "problem", "before-fully-shard", -1, -1, first,
                fmt::format("the optimizer ({}) holds none of the {} sharded parameters FSDP trains{}: fully_shard "
                            "replaces each parameter with a sharded DTensor, so an optimizer built before it steps the "
                            "old, unsharded tensors and the model never changes. Build the optimizer after "
                            "fully_shard(model), over model.parameters()",
                            m.optimizer_class, missing,
                            m.foreign_params ? fmt::format(" (it holds {} other tensors)", m.foreign_params) : ""));
      return;
    }
    found.add("optimizer-misses-parameters", "problem", none ? "none" : "some", -1, -1, first,
              none ? fmt::format("the optimizer ({}) holds none of DDP's {} parameters{}: optimizer.step() never "
                                 "changes the model DDP trains. Usually an optimizer built over another model's "
                                 "parameters (copy.deepcopy(model), a model made again) instead of "
                                 "ddp_model.parameters()",
                                 m.optimizer_class, missing,
                                 m.foreign_params ? fmt::format(" (it holds {} other tensors)", m.foreign_params) : "")
                   : fmt::format("the optimizer ({}) holds {} of DDP's {} parameters: {} of them (first '{}') get "
                                 "DDP's averaged gradient but are never stepped. Usually param_groups built from part "
                                 "of the model, or parameters added after the optimizer was made",
                                 m.optimizer_class, held, m.params.size() + m.unchecked_params.size(), missing, first));
  }
}

void what_the_run_did(const Manifest& m, const RunSeen& seen, Findings& found) {
  if (seen.averagings > 0)
    found.add("model-averaging", "note", "", -1, -1, "",
              fmt::format("post-local SGD: the replicas were equal right after each of the {} model averagings "
                          "({} of them bit for bit the average ddp_check predicts: the flattened parameters divided by "
                          "world_size, summed in Gloo's ring order); between them each rank steps with its own "
                          "gradient, so they differ by design and are not compared",
                          seen.averagings, seen.averagings_exact));
  if (m.fsdp.present && seen.any_local && !seen.any_sync) {
    found.add("not-reduced", "problem", "gradient-sync-off", 0, -1, "",
              "no recorded backward reduce-scattered its gradients: set_requires_gradient_sync(False) stayed on, so "
              "each rank's gradients stay in FSDP's unsharded parameters, never reach the reduce-scatter, and "
              "optimizer.step() finds no sharded .grad. Set it back to True before each step's last backward "
              "(model.set_requires_gradient_sync(is_last_micro_batch))");
    return;
  }
  if (seen.any_local && !seen.any_nonzero) {
    found.add("nothing-trains", "problem", "zero-gradients", 0, -1, "",
              "every gradient of every rank is exactly zero at every recorded step: the loss does not depend on the "
              "parameters. Usually a loss that is constant, e.g. nn.CrossEntropyLoss over a model with one output "
              "column (softmax over one class is always 1, so the loss is 0), or a loss computed from detached "
              "tensors");
  } else if (!seen.any_moved && seen.steps && !m.params.empty()) {
    found.add("nothing-trains", "problem", "parameters-unchanged", 0, -1, "",
              m.fsdp.present ? "optimizer.step() never changed a parameter of the FSDP model at any recorded step: "
                               "usually an optimizer over other tensors than model.parameters() after fully_shard, "
                               "or lr=0"
                             : "optimizer.step() never changed a parameter of the DDP model at any recorded step: "
                               "usually an optimizer over other tensors than ddp_model.parameters(), or lr=0");
  }
}

}  // namespace ddplab::check
