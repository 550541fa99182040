// ddp_questions TOPIC [flags]: answers one question learners ask about DDP by running the simulator on the
// runs that answer it, side by side (src/questions/). docs/questions.md lists every question and command.
#include <cstdio>
#include <string>

#include <fmt/format.h>

#include "src/base/errors.h"
#include "src/base/flags.h"
#include "src/base/parallel.h"
#include "src/ddp/config.h"
#include "src/questions/questions.h"
#include "src/questions/topics.h"

namespace {

using namespace ddplab;

std::string topic_list() {
  std::string out;
  for (const questions::Topic& t : questions::topics()) out += fmt::format("  {:<13} {}\n", t.name, t.question);
  return out;
}

std::string topic_names() {
  std::string names;
  for (const questions::Topic& t : questions::topics()) names += (names.empty() ? "" : ", ") + std::string(t.name);
  return names;
}

int run(int argc, char** argv) {
  auto known = ddp::config_flag_names();
  known.insert("threads");
  for (const char* f : {"link-gbps", "link-latency-us", "compute-gflops"}) known.insert(f);  // speed's cost model
  const Flags flags(argc, argv, known, {"seed-per-rank"});
  if (!flags.help() && flags.positional().empty()) {
    throw UsageError("name a topic: ddp_questions TOPIC [flags] (topics: " + topic_names() + "; --help says more)");
  }
  if (flags.help()) {
    std::printf("usage: ddp_questions TOPIC [flags]\nAnswers a question about DDP by simulating the runs that "
                "answer it, side by side, ending in `answer:` lines.\nTopics:\n%s\nEvery topic takes ddp_sim's "
                "flags (each topic picks defaults that show its case; the flags you give win):\n%s%s"
                "speed's cost model (ddp_sim --trace's): --link-gbps G [10] --link-latency-us A [5] "
                "--compute-gflops F [50]\n",
                topic_list().c_str(), ddp::config_usage(), threads_usage());
    return 0;
  }
  if (flags.positional().size() > 1) throw UsageError("one topic at a time (got '" + flags.positional()[1] + "' too)");
  const questions::Topic* topic = questions::find_topic(flags.positional()[0]);
  if (topic == nullptr) {
    throw UsageError("unknown topic '" + flags.positional()[0] + "' (topics: " + topic_names() + ")");
  }
  for (const char* f : {"link-gbps", "link-latency-us", "compute-gflops"}) {
    if (flags.has(f) && std::string(topic->name) != "speed")
      throw UsageError(std::string("--") + f + " is the speed topic's cost model flag, not " + topic->name + "'s");
  }
  questions::speed_cost_model() = cost_model_from_flags(flags);
  ddp::Config cfg = ddp::config_from_flags(flags, topic->defaults);
  if (cfg.is_gpt()) throw UsageError("ddp_questions runs the sequential models (--model mlp, cnn or a spec), not gpt");
  cfg.threads = threads_from_flags(flags);
  // These topics compare DDP over several ranks with one device: at one rank there is nothing to compare, and an
  // answer built from it would say "1 times fewer steps" or "replicas drift apart (0 and 0)"; fsdp refuses
  // in its own check.
  const std::string name = topic->name;
  if (cfg.world_size < 2 && (name == "loss-scale" || name == "batch-size" || name == "lr-scaling" || name == "evaluation" ||
                              name == "speed" || name == "accumulation"))
    throw UsageError(name + " compares DDP over several ranks with one device: --world-size 1 has nothing to compare "
                            "(give 2 to 64)");
  if (topic->check != nullptr) topic->check(cfg);
  fmt::print("question: {}\nddp_questions {}: {}\n{}\n", topic->question, topic->name, ddp::describe(cfg),
             ddp::describe_notes(cfg));
  std::fflush(stdout);
  topic->run(cfg);
  return 0;
}

}  // namespace

int main(int argc, char** argv) { return ddplab::guarded_main("ddp_questions", argc, argv, run); }
