// Runs every command the documentation shows (README.md and docs/*.md), so that a page cannot drift from the
// programs it describes.
//
// The convention a command in the docs follows:
// - In a fenced block whose info string is `sh`, every line that is not blank and does not start with `#` is a
//   command. In a fenced block whose info string is `console`, a line starting with `$ ` is a command and the
//   lines after it, up to the next `$ ` or the end of the block, are output: each must appear, as written, in
//   what the command printed (stdout and stderr together); a line `...` stands for lines left out.
// - An inline code span outside fenced blocks that starts with `bazel-bin/` or `bazel run //` and has arguments
//   (a space) is a command too (tables of questions and commands).
// - Text after `  #` (two spaces) is a comment. A comment `# exit N` states the exit status the command ends
//   with; without one it must be 0.
// - Commands are `bazel-bin/PKG/NAME ARGS`, run from the repository root, or `bazel run //PKG:NAME -- ARGS`
//   (`//PKG/NAME` alone means `//PKG/NAME:NAME`). Each maps to the binary in this test's runfiles (a data
//   dependency in tests/BUILD); an argument starting with `/tmp/` is moved into the test's temporary directory.
// - Every other command (installing, building, a GPU, several hosts, a run the reader records) must be listed in
//   kExempt below with the reason it cannot run here; a command that is neither mapped nor exempt fails the
//   test, and so does an exemption no page uses any more, and so does a line outside `sh`/`console` blocks that
//   starts like a command (`bazel`, `tools/`, `torchrun`, `mpirun`), so that no command hides from the test.
// - A `bazel-bin/` command is pasted into bash as written, in a directory laid out as a checkout after the build
//   (its bazel-bin the runfiles): quotes, comments and globbing are bash's, as on a learner's machine.
// Each command runs under `timeout` (kTimeoutSeconds). Keep the docs' commands small: the whole test should stay
// within a few minutes on 2 cores.
#include <dirent.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <map>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "tests/testing.h"

namespace {

using ddplab::testing::CommandResult;
using ddplab::testing::run_command;

constexpr int kTimeoutSeconds = 120;

// Commands the docs show that this test does not run, each with why. Keys are the command as written (the
// comment removed, spaces trimmed).
const std::map<std::string, std::string>& exempt() {
  static const std::map<std::string, std::string> m = {
      {"tools/install_deps.sh && bazel run //sim:two_replica",
       "installs Debian packages (root or sudo, apt); bazel-bin/sim/two_replica itself runs in docs/simulator.md"},
      {"tools/install_deps.sh", "installs Debian packages (root or sudo, apt)"},
      {"bazel test //...", "the test suite this test is part of"},
      {"bazel build //sim:all //verify:all //notebooks_ported/...",
       "Bazel inside a test; the binaries it builds are this test's data dependencies"},
      {"bazel run //sim:ddp_sim -- FLAGS", "a pattern: FLAGS stands for any flags"},
      {"tools/gpu_checks.sh bundle", "runs Bazel, for a GPU machine"},
      {"tools/gpu_checks.sh run OUT", "needs a GPU (tests/nccl_test and gpu_trainer_test skip without one)"},
      {"bazel-bin/verify/ddp_verify --backend nccl --nproc 4 --share-gpus --nccl-exact --kernels reference",
       "needs a GPU (tests/nccl_test runs it where there is one)"},
      {"torchrun --no-python --nproc-per-node 2 bazel-bin/verify/ddp_verify",
       "needs torch 2.x's torchrun (Debian's fails under Python 3.11); tests/torchrun_test covers the protocol"},
      {"RANK=0 WORLD_SIZE=2 MASTER_ADDR=hostA MASTER_PORT=6379 bazel-bin/verify/ddp_verify --bind hostA --run-id exp1",
       "two hosts and a Redis server; tests/multihost_test and ddp_verify_test cover it"},
      {"RANK=1 WORLD_SIZE=2 MASTER_ADDR=hostA MASTER_PORT=6379 bazel-bin/verify/ddp_verify --bind hostB --run-id exp1",
       "two hosts and a Redis server; tests/multihost_test and ddp_verify_test cover it"},
      {"mpirun -np 4 bazel-bin/verify/ddp_verify --store file:/shared/ddp-run-1",
       "OpenMPI and a shared directory; tests/ddp_verify_test covers the mpirun rendezvous"},
      {"bazel-bin/verify/ddp_check runs/mine [--json FILE] [--report FILE.html]",
       "the reader's own recorded run; lab 008's command runs the same path on a recorded run"},
      {"bazel-bin/verify/ddp_check runs/mine",
       "the reader's own recorded run; lab 008's command runs the same path on a recorded run"},
  };
  return m;
}

struct DocCommand {
  std::string file;
  int line = 0;
  std::string text;                 // as written, the comment removed
  int expected_status = 0;          // `# exit N`
  std::vector<std::string> output;  // console blocks: lines that must appear
};

std::string trim(const std::string& s) {
  const size_t b = s.find_first_not_of(" \t");
  if (b == std::string::npos) return "";
  const size_t e = s.find_last_not_of(" \t");
  return s.substr(b, e - b + 1);
}

bool starts_with(const std::string& s, const std::string& p) { return s.compare(0, p.size(), p) == 0; }

// Splits "command  # comment" and reads `# exit N` from the comment.
void split_comment(const std::string& raw, std::string* command, int* status) {
  const size_t hash = raw.find("  #");
  *command = trim(hash == std::string::npos ? raw : raw.substr(0, hash));
  *status = 0;
  if (hash == std::string::npos) return;
  const std::string comment = raw.substr(hash);
  const size_t at = comment.find("# exit ");
  if (at != std::string::npos) *status = std::atoi(comment.c_str() + at + 7);
}

bool looks_like_command(const std::string& line) {
  const std::string t = trim(line);
  for (const char* p : {"bazel ", "bazel-bin/", "tools/", "torchrun ", "mpirun ", "$ bazel", "$ tools/"}) {
    if (starts_with(t, p)) return true;
  }
  return false;
}

std::string read_file(const std::string& path) {
  std::ifstream in(path);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

// The documents: README.md and every docs/*.md in the runfiles.
std::vector<std::string> doc_files() {
  std::vector<std::string> files = {"README.md"};
  if (DIR* d = opendir("docs")) {
    while (dirent* e = readdir(d)) {
      const std::string name = e->d_name;
      if (name.size() > 3 && name.substr(name.size() - 3) == ".md") files.push_back("docs/" + name);
    }
    closedir(d);
  }
  std::sort(files.begin() + 1, files.end());
  return files;
}

// Every command of one document; `misplaced` gets lines that look like commands outside sh/console blocks.
std::vector<DocCommand> extract(const std::string& file, std::vector<std::string>* misplaced) {
  std::vector<DocCommand> cmds;
  std::istringstream in(read_file(file));
  std::string line, fence_info;
  bool in_fence = false;
  int n = 0;
  while (std::getline(in, line)) {
    ++n;
    const std::string t = trim(line);
    if (starts_with(t, "```")) {
      if (in_fence) {
        in_fence = false;
      } else {
        in_fence = true;
        fence_info = trim(t.substr(3));
      }
      continue;
    }
    if (in_fence) {
      if (fence_info == "sh") {
        if (t.empty() || t[0] == '#') continue;
        DocCommand c;
        c.file = file;
        c.line = n;
        split_comment(t, &c.text, &c.expected_status);
        cmds.push_back(c);
      } else if (fence_info == "console") {
        if (starts_with(t, "$ ")) {
          DocCommand c;
          c.file = file;
          c.line = n;
          split_comment(t.substr(2), &c.text, &c.expected_status);
          cmds.push_back(c);
        } else if (!cmds.empty() && !t.empty() && t != "...") {
          cmds.back().output.push_back(line);
        }
      } else if (looks_like_command(line)) {
        misplaced->push_back(file + ":" + std::to_string(n) + ": " + t);
      }
      continue;
    }
    if (looks_like_command(line)) misplaced->push_back(file + ":" + std::to_string(n) + ": " + t);
    // Inline code spans that are commands.
    size_t pos = 0;
    while ((pos = line.find('`', pos)) != std::string::npos) {
      const size_t end = line.find('`', pos + 1);
      if (end == std::string::npos) break;
      const std::string span = line.substr(pos + 1, end - pos - 1);
      if ((starts_with(span, "bazel-bin/") || starts_with(span, "bazel run //")) &&
          span.find(' ') != std::string::npos) {
        DocCommand c;
        c.file = file;
        c.line = n;
        split_comment(span, &c.text, &c.expected_status);
        cmds.push_back(c);
      }
      pos = end + 1;
    }
  }
  return cmds;
}

// Shell-like words: whitespace separates, single and double quotes group.
std::vector<std::string> words(const std::string& s) {
  std::vector<std::string> out;
  std::string cur;
  bool have = false;
  char quote = 0;
  for (const char ch : s) {
    if (quote) {
      if (ch == quote) {
        quote = 0;
      } else {
        cur += ch;
      }
    } else if (ch == '\'' || ch == '"') {
      quote = ch;
      have = true;
    } else if (ch == ' ' || ch == '\t') {
      if (have) out.push_back(cur);
      cur.clear();
      have = false;
    } else {
      cur += ch;
      have = true;
    }
  }
  if (have) out.push_back(cur);
  return out;
}

// The binary's runfiles path and its arguments, or an empty path when the command is not one this test maps.
bool map_command(const std::string& text, std::string* binary, std::vector<std::string>* args, std::string* why) {
  std::vector<std::string> w = words(text);
  if (w.empty()) {
    *why = "empty";
    return false;
  }
  for (const std::string& x : w) {
    if (x == "|" || x == "&&" || x == ";" || x == ">" || x.find('$') != std::string::npos) {
      *why = "shell syntax ('" + x + "'): make it one plain command, or exempt it";
      return false;
    }
  }
  size_t first_arg = 1;
  if (starts_with(w[0], "bazel-bin/")) {
    *binary = w[0].substr(10);
  } else if (w[0] == "bazel" && w.size() >= 3 && w[1] == "run" && starts_with(w[2], "//")) {
    std::string label = w[2].substr(2);
    const size_t colon = label.find(':');
    if (colon == std::string::npos) {
      *binary = label + "/" + label.substr(label.rfind('/') + 1);
    } else {
      *binary = label.substr(0, colon) + "/" + label.substr(colon + 1);
    }
    first_arg = 3;
    if (w.size() > 3) {
      if (w[3] != "--") {
        *why = "bazel run takes the program's flags after --";
        return false;
      }
      first_arg = 4;
    }
  } else {
    *why = "not bazel-bin/... nor bazel run //...";
    return false;
  }
  if (access(binary->c_str(), X_OK) != 0) {
    *why = "no executable " + *binary + " in the runfiles: add its target to docs_commands_test's data";
    return false;
  }
  const char* tmp = std::getenv("TEST_TMPDIR");
  for (size_t i = first_arg; i < w.size(); ++i) {
    std::string a = w[i];
    if (starts_with(a, "/tmp/") && tmp) a = std::string(tmp) + "/" + a.substr(5);
    args->push_back(a);
  }
  return true;
}

// A directory laid out as a checkout after `bazel build`: the runfiles' files and folders, and bazel-bin pointing
// at them, so that a command pasted into bash there finds bazel-bin/sim/ddp_sim and sim/questions/ as a learner's
// shell does.
std::string checkout_dir() {
  static std::string dir;
  if (!dir.empty()) return dir;
  char cwd[4096];
  if (getcwd(cwd, sizeof cwd) == nullptr) return "";
  const char* tmp = std::getenv("TEST_TMPDIR");
  dir = std::string(tmp ? tmp : "/tmp") + "/checkout";
  mkdir(dir.c_str(), 0755);
  if (symlink(cwd, (dir + "/bazel-bin").c_str()) != 0 && errno != EEXIST) return "";
  if (DIR* d = opendir(cwd)) {
    while (const dirent* e = readdir(d)) {
      const std::string name = e->d_name;
      // An entry already linked (a second call) is kept; any other failure leaves that entry out, which the
      // command that needs it then names.
      if (name != "." && name != ".." && symlink((std::string(cwd) + "/" + name).c_str(), (dir + "/" + name).c_str()) != 0)
        continue;
    }
    closedir(d);
  }
  return dir;
}

// The command as a learner pastes it into bash in their checkout (/tmp/ paths moved into the test's directory), or,
// for `bazel run //...` (Bazel inside a test), its program on the mapped arguments.
std::vector<std::string> pasted_argv(const std::string& text, const std::string& binary,
                                     const std::vector<std::string>& args) {
  std::vector<std::string> argv = {"/usr/bin/timeout", "-k", "5", std::to_string(kTimeoutSeconds)};
  if (!starts_with(text, "bazel-bin/")) {
    argv.push_back(binary);
    argv.insert(argv.end(), args.begin(), args.end());
    return argv;
  }
  std::string line = text;
  const char* tmp = std::getenv("TEST_TMPDIR");
  for (size_t at = line.find(" /tmp/"); tmp && at != std::string::npos; at = line.find(" /tmp/", at + 1))
    line.replace(at + 1, 5, std::string(tmp) + "/");
  argv.insert(argv.end(), {"/bin/bash", "-c", "cd '" + checkout_dir() + "' && " + line});
  return argv;
}

std::vector<DocCommand> all_commands(std::vector<std::string>* misplaced) {
  std::vector<DocCommand> all;
  for (const std::string& f : doc_files()) {
    const std::vector<DocCommand> c = extract(f, misplaced);
    all.insert(all.end(), c.begin(), c.end());
  }
  return all;
}

TEST(DocsCommands, TheDocsAreHere) {
  const std::vector<std::string> files = doc_files();
  for (const char* want : {"README.md", "docs/simulator.md", "docs/verifier.md", "docs/models.md", "docs/tiny_gpt.md",
                           "docs/hooks_zero_join.md", "docs/launching_and_stores.md", "docs/report.md",
                           "docs/checking_a_real_run.md", "docs/development.md"}) {
    EXPECT_NE(std::find(files.begin(), files.end(), want), files.end()) << want << " is not in the runfiles";
  }
}

TEST(DocsCommands, EveryCommandIsRunOrExempt) {
  std::vector<std::string> misplaced;
  const std::vector<DocCommand> cmds = all_commands(&misplaced);
  for (const std::string& m : misplaced) {
    ADD_FAILURE() << "a command outside a ```sh or ```console block (the test would not see it): " << m;
  }
  std::set<std::string> used_exemptions;
  for (const DocCommand& c : cmds) {
    if (exempt().count(c.text)) {
      used_exemptions.insert(c.text);
      continue;
    }
    std::string binary, why;
    std::vector<std::string> args;
    EXPECT_TRUE(map_command(c.text, &binary, &args, &why))
        << c.file << ":" << c.line << ": '" << c.text << "' cannot be run: " << why;
  }
  for (const auto& [text, reason] : exempt()) {
    EXPECT_TRUE(used_exemptions.count(text)) << "exemption no page uses any more (remove it): " << text;
  }
  std::printf("%zu commands in the docs, %zu exempt\n", cmds.size(), used_exemptions.size());
}

TEST(DocsCommands, EveryCommandRunsAsDocumented) {
  std::vector<std::string> misplaced;
  const std::vector<DocCommand> cmds = all_commands(&misplaced);
  int ran = 0;
  const auto t0 = std::chrono::steady_clock::now();
  for (const DocCommand& c : cmds) {
    if (exempt().count(c.text)) continue;
    std::string binary, why;
    std::vector<std::string> args;
    if (!map_command(c.text, &binary, &args, &why)) continue;  // EveryCommandIsRunOrExempt says why
    // Pasted into bash as the page shows it, the command parses (parentheses in a --model spec need quotes).
    const CommandResult pasted = run_command({"/bin/bash", "-n", "-c", c.text});
    EXPECT_EQ(pasted.status, 0) << c.file << ":" << c.line << ": '" << c.text << "' is not valid bash: " << pasted.err;
    const std::vector<std::string> argv = pasted_argv(c.text, binary, args);
    const auto start = std::chrono::steady_clock::now();
    const CommandResult r = run_command(argv);
    const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    ++ran;
    std::printf("%5.1f s  exit %d  %s:%d  %s\n", secs, r.status, c.file.c_str(), c.line, c.text.c_str());
    const std::string all = r.out + r.err;
    EXPECT_NE(r.status, 124) << c.file << ":" << c.line << ": '" << c.text << "' ran past " << kTimeoutSeconds << " s";
    EXPECT_EQ(r.status, c.expected_status) << c.file << ":" << c.line << ": '" << c.text << "'\nstdout:\n"
                                           << r.out << "\nstderr:\n"
                                           << r.err;
    if (c.expected_status == 2) {  // bad input: "one clear line naming what is wrong"
      EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1)
          << c.file << ":" << c.line << ": '" << c.text << "' refused in more or less than one line:\n"
          << r.err;
    }
    for (const std::string& want : c.output) {
      EXPECT_NE(all.find(want), std::string::npos)
          << c.file << ":" << c.line << ": '" << c.text << "' did not print the line the docs show:\n  " << want
          << "\nit printed:\n"
          << all;
    }
  }
  std::printf("ran %d commands in %.1f s\n", ran,
              std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  EXPECT_GT(ran, 10);
}

// A paragraph of prose (blank lines, headings, list items and table rows start a new one); the fenced blocks
// after it, up to the next paragraph, belong to it.
struct Paragraph {
  std::string file, text;
  int first = 0, last = 0;  // lines, inclusive
};

std::vector<Paragraph> paragraphs(const std::string& file) {
  std::vector<Paragraph> out;
  std::istringstream in(read_file(file));
  std::string line;
  bool in_fence = false, gap = true;  // gap: a blank line or a fenced block since the last prose line
  int n = 0;
  const auto start = [&](int at, const std::string& t) { out.push_back({file, t, at, at}); };
  while (std::getline(in, line)) {
    ++n;
    const std::string t = trim(line);
    if (starts_with(t, "```")) in_fence = !in_fence;
    if (in_fence || starts_with(t, "```") || t.empty()) {
      if (!out.empty()) out.back().last = n;
      gap = true;
      continue;
    }
    const bool new_one = gap || t[0] == '|' || t[0] == '#' || starts_with(t, "- ") || starts_with(t, "**");
    gap = false;
    if (new_one) {
      start(n, t);
    } else {
      out.back().text += " " + t;
      out.back().last = n;
    }
  }
  return out;
}

// Claims of a refusal that no command here can show, each with why, as (file, a phrase of the paragraph).
const std::map<std::pair<std::string, std::string>, std::string>& refusal_exempt() {
  static const std::map<std::pair<std::string, std::string>, std::string> m = {
      {{"docs/ARCHITECTURE.md", "any other layer is refused"},
       "design notes; docs/verifier.md shows the refusal as a command"},
      {{"docs/checking_a_real_run.md", "torch 1.13 refuses `bf16_compress_hook`"}, "PyTorch's refusal, not ddplab's"},
      {{"docs/questions.md", "`DDP(model)` refuses it on"},
       "PyTorch's refusal, not ddplab's; questions_reference_test runs syncbn_cpu.py, which shows it"},
      {{"docs/checking_a_real_run.md", "`tests/ddp_check_test` runs the learner-style scripts"},
       "what a test checks: the test runs it"},
      {{"docs/hooks_zero_join.md", "torch 1.13 refuses it without CUDA"}, "PyTorch's refusal, not ddplab's"},
      {{"docs/launching_and_stores.md", "different flags are refused"},
       "needs ranks started by separate commands with different flags; tests/ddp_verify_test runs it"},
      {{"docs/report.md", "`tests/report_test`"}, "what a test checks: the test runs it"},
      {{"docs/simulator.md", "crafted files are refused"},
       "needs a crafted file; tests/safetensors_read_test and safetensors_fuzz_test make them"},
      {{"docs/simulator.md", "**Checked by**"}, "what the tests check: the tests run it"},
      {{"docs/trace_format.md", "ddp_check refuses (exit 2, one line) an `\"fsdp\"`"},
       "needs a crafted manifest; tests/check_trace_test's BadFsdpManifestsGetOneLine makes five"},
  };
  return m;
}

// Every paragraph of README.md and docs/ that says something is refused shows it: an inline command or a fenced
// block after it that this test runs with a non-zero `# exit N` (the claim about PyTorch and the test
// descriptions exempt, each with why). docs/development.md's table says what each test checks and is left out.
// ddp_questions accumulation explains the last bits it shows: at 2 ranks and 4 micro-batches every division is by a
// power of two, which rounds nothing (the learner's walkthrough found "1/4 is rounded"), so the order of the
// additions alone moves them. The arithmetic fact itself, as float32 does it:
TEST(DocsCommands, AccumulationBlamesTheOrderNotAnExactDivision) {
  for (float x : {0.1f, 1.0f / 3.0f, 12345.678f, 1e-30f}) EXPECT_EQ(x / 4.0f * 4.0f, x) << x;
  const CommandResult r = run_command({"sim/ddp_questions", "accumulation"});
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_EQ(r.out.find("is rounded"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("dividing by a power of two is exact"), std::string::npos) << r.out;
}

// The topics that compare several ranks with one device refuse one rank in one line (exit 2), instead of answering
// "1 times fewer steps".
TEST(DocsCommands, TopicsRefuseOneRank) {
  for (const char* topic : {"loss-scale", "batch-size", "lr-scaling", "evaluation", "fsdp"}) {
    const CommandResult r = run_command({"sim/ddp_questions", topic, "--world-size", "1"});
    EXPECT_EQ(r.status, 2) << topic << ": " << r.out;
    EXPECT_EQ(r.out.find("answer:"), std::string::npos) << topic;
    EXPECT_NE(r.err.find("--world-size 1"), std::string::npos) << topic << ": " << r.err;
    EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << topic << ": " << r.err;
  }
}

// A run that diverges says so, where its numbers first became NaN or inf, with exit status 4: never "please
// report", and no answer built from NaN.
TEST(DocsCommands, DivergedRunsSayWhereAndExit4) {
  const CommandResult sim = run_command({"sim/ddp_sim", "--lr", "1000000", "--quiet"});
  EXPECT_EQ(sim.status, 4) << sim.err;
  EXPECT_EQ(sim.out.find("please report"), std::string::npos) << sim.out;
  EXPECT_NE(sim.err.find("became NaN or inf at step "), std::string::npos) << sim.err;
  EXPECT_NE(sim.err.find(" on rank "), std::string::npos) << sim.err;
  const CommandResult q = run_command({"sim/ddp_questions", "lr-scaling", "--lr", "100"});
  EXPECT_EQ(q.status, 4) << q.err;
  EXPECT_EQ(q.out.find("answer:"), std::string::npos) << q.out;
  EXPECT_NE(q.err.find("no answer is built from it"), std::string::npos) << q.err;
}

// The Join run says that a rank skipped steps, not that every rank took every step (its parameters end equal
// because Join's end copies them: tests/join_test.cc checks that against torch).
TEST(DocsCommands, JoinRunSaysRanksSkippedSteps) {
  const CommandResult r = run_command({"sim/ddp_sim", "--world-size", "3", "--uneven", "1", "--join", "true", "--quiet"});
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_EQ(r.out.find("every optimizer step is the same on every rank"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("skipped their last"), std::string::npos) << r.out;
}

// The rebuilt bucket layout is shown only for a run that uses it: not after one step, not where torch raised before
// rebuilding, and from iteration 2 under static_graph (ddp_sim_test's LiveStaticGraphRebuildsAnIterationLater).
TEST(DocsCommands, RebuiltLayoutOnlyWhereTheRunUsesIt) {
  const CommandResult one = run_command({"sim/ddp_sim", "--samples", "16", "--quiet"});
  EXPECT_NE(one.out.find("buckets not rebuilt within the run"), std::string::npos) << one.out;
  const CommandResult raised = run_command({"sim/ddp_sim", "--world-size", "3", "--layers", "5,4", "--model",
                                            "linear(5,8),relu,unused_linear(8,8),linear(8,4)", "--quiet"});
  EXPECT_EQ(raised.status, 1);
  EXPECT_NE(raised.out.find("buckets not rebuilt: the run raised"), std::string::npos) << raised.out;
  const CommandResult fixed = run_command({"sim/ddp_sim", "--static-graph", "true", "--quiet"});
  EXPECT_NE(fixed.out.find("buckets from iteration 2 "), std::string::npos) << fixed.out;
}

TEST(DocsCommands, EveryRefusalClaimIsRun) {
  std::vector<std::string> misplaced;
  const std::vector<DocCommand> cmds = all_commands(&misplaced);
  std::set<std::pair<std::string, std::string>> used;
  int claims = 0;
  for (const std::string& f : doc_files()) {
    if (f == "docs/development.md") continue;
    for (const Paragraph& p : paragraphs(f)) {
      std::string lower = p.text;
      std::transform(lower.begin(), lower.end(), lower.begin(), ::tolower);
      if (lower.find("refus") == std::string::npos) continue;
      ++claims;
      const bool shown = std::any_of(cmds.begin(), cmds.end(), [&](const DocCommand& c) {
        return c.file == f && c.line >= p.first && c.line <= p.last && c.expected_status != 0 && !exempt().count(c.text);
      });
      if (shown) continue;
      bool excused = false;
      for (const auto& [key, why] : refusal_exempt()) {
        if (key.first == f && p.text.find(key.second) != std::string::npos) {
          used.insert(key);
          excused = true;
        }
      }
      EXPECT_TRUE(excused) << f << ":" << p.first << ": a refusal the docs claim without a command that shows it "
                           << "(add one with `# exit 2`, or exempt it with why):\n  " << p.text.substr(0, 300);
    }
  }
  for (const auto& [key, why] : refusal_exempt()) {
    EXPECT_TRUE(used.count(key)) << "refusal exemption no paragraph needs any more (remove it): " << key.first << ": "
                                 << key.second;
  }
  std::printf("%d paragraphs claim a refusal\n", claims);
  EXPECT_GT(claims, 10);
}

}  // namespace
