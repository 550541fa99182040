// bazel run //verify:ddp_check -- RUN_DIR [--json FILE] [--report FILE.html]
// Checks a real PyTorch DDP run recorded by verify/ddplab_trace: replays DDP from every rank's own
// local gradients with ddplab's Reducer, collectives, comm hooks and optimizers, and compares with what
// the ranks recorded, step by step. Exit: 0 nothing of severity "problem" found, 1 something was,
// 2 bad input (a bad trace: one line naming the file and what is wrong).
#include <malloc.h>

#include <cstdio>
#include <limits>
#include <string>

#include "src/check/check.h"
#include "src/base/flags.h"
#include "src/base/io.h"

namespace {

using namespace ddplab;

constexpr const char* kUsage = R"(usage: ddp_check RUN_DIR [--json FILE] [--report FILE.html] [--quiet]
Checks a PyTorch DDP run recorded with verify/ddplab_trace (DDPTrace or LightningCallback).
  RUN_DIR            the directory given to DDPTrace (rank0/, rank1/, ...)
  --json FILE        the verdict, counts and findings as JSON (written atomically)
  --report FILE.html the run as one page: findings, per step predicted vs recorded, the first divergence
  --quiet            only the summary, findings and verdict
Exit status: 0 as predicted (notes allowed), 1 problems found, 2 bad input.
)";

int run(int argc, char** argv) {
  // Every step reads tensors of the same sizes as the last: keep freed memory in the heap for the next step
  // instead of returning it to the kernel (mmap'd blocks come back as fresh pages the kernel must zero).
  mallopt(M_MMAP_MAX, 0);
  mallopt(M_TRIM_THRESHOLD, std::numeric_limits<int>::max());
  Flags f(argc, argv, {"json", "report", "quiet"}, {"quiet"});
  if (f.help()) {
    std::fputs(kUsage, stdout);
    return 0;
  }
  if (f.positional().size() != 1) throw UsageError("ddp_check takes one RUN_DIR (got " + std::to_string(f.positional().size()) + "); --help for usage");
  const std::string json_path = f.get_string("json", ""), report_path = f.get_string("report", "");
  for (const std::string& p : {json_path, report_path})
    if (!p.empty())
      if (std::string why = check_writable(p); !why.empty()) throw UsageError(why);
  const check::Run run = check::open_run(f.positional()[0]);
  const check::CheckResult result = check::check_run(run);
  std::string text = check::format_text(result);
  if (f.get_bool("quiet", false)) {
    const size_t at = text.find("\nsummary:");
    if (at != std::string::npos) text = text.substr(at + 1);
  }
  std::fputs(text.c_str(), stdout);
  if (!json_path.empty())
    if (std::string why = write_file_atomic(json_path, check::format_json(result)); !why.empty()) throw RunError(why);
  if (!report_path.empty())
    if (std::string why = write_file_atomic(report_path, check::format_html(result)); !why.empty()) throw RunError(why);
  return result.problems() ? 1 : 0;
}

}  // namespace

int main(int argc, char** argv) { return ddplab::guarded_main("ddp_check", argc, argv, run); }
