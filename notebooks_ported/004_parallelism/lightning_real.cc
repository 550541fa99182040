#include "notebooks_ported/004_parallelism/lightning_real.h"

#include <set>

#include <fmt/format.h>

#include "notebooks_ported/lab/traced_run.h"

namespace ddplab::lab004 {

std::string lightning_real() {
  constexpr const char* kScript = "notebooks_ported/004_parallelism/lightning_ddp.py";
  lab::TracedRun run;
  std::string why;
  lab::run_traced(lab::torch2_python(), kScript, {}, &run, &why);
  if (!why.empty())
    return "\n# the notebook's Lightning code for real: skipped (" + why +
           "; tools/install_deps.sh --with-torch2 makes torch 2.x and Lightning)\n";
  std::string text = "\n# the notebook's Lightning code for real: Trainer(strategy=\"ddp\", accelerator=\"cpu\", devices=2), "
                     "traced by ddplab_trace.LightningCallback, checked by ddp_check\n";
  std::set<std::string> digests;
  const std::string& out = run.out;
  for (size_t at = out.find("rank "); at != std::string::npos; at = out.find("rank ", at + 1)) {
    const size_t b = out.find("blake2b ", at);
    if (b == std::string::npos) break;
    const std::string digest = out.substr(b + 8, 16);
    text += fmt::format("{}: its own toy_x, blake2b {}\n", out.substr(at, out.find(':', at) - at), digest);
    digests.insert(digest);
  }
  if (run.status != 0) return text + fmt::format("the run failed (exit status {}): run {} by hand to see why\n", run.status, kScript);
  try {
    const check::CheckResult res = lab::check_traced(run);
    const std::string full = check::format_text(res);
    text += full.substr(full.find("step    0"));
    // The allclose rows, read here rather than in another page: the gradients are exact; the step is not.
    if (res.params.allclose > 0 && !res.step_exact) {
      text += fmt::format(
          "Why \"params N/4 exact, M allclose\" while every gradient is exact: DDP's part (the averaged gradients) is "
          "bit for bit, but {}. An allclose parameter is one where that last bit moved.\n",
          res.step_why);
    }
  } catch (const std::exception& e) {
    return text + std::string("ddp_check could not read the trace: ") + e.what() + "\n";
  }
  return text + (digests.size() > 1
                     ? "Each rank's ToyDataModule drew its own torch.randn(1000, 100) (the notebook seeds nothing, and "
                       "the digests above differ), and Lightning's DistributedSampler then gave each rank 500 samples "
                       "of its OWN set: the ranks never train on one dataset. DDP keeps the replicas equal all the "
                       "same (replicas equal at every step above): it averages gradients, whatever data made them.\n"
                     : "The ranks drew the same toy_x here, and Lightning's DistributedSampler gave each a different "
                       "half of it.\n");
}

}  // namespace ddplab::lab004
