// The table of topics: the name a learner types, the question, the topic's defaults and its run.
#include "src/questions/topics.h"

namespace ddplab::questions {

const std::vector<Topic>& topics() {
  static const std::vector<Topic> t = {
      {"loss-scale", "Are gradients summed or averaged across ranks: should I divide my loss by the world size?",
       loss_scale_defaults, nullptr, loss_scale_run},
      {"batch-size", "Is batch_size per process or global, and how many steps does an epoch take?",
       batch_size_defaults, nullptr, batch_size_run},
      {"lr-scaling",
       "Should I scale the learning rate with the number of GPUs? Why does my DDP run train worse than one GPU?",
       lr_scaling_defaults, nullptr, lr_scaling_run},
      {"evaluation",
       "Evaluate on every rank or on rank 0? What does DistributedSampler's padding do to validation accuracy?",
       evaluation_defaults, evaluation_check, evaluation_run},
      {"accumulation", "Is no_sync() accumulation of K micro-batches the same as one K times larger batch?",
       accumulation_defaults, accumulation_check, accumulation_run},
      {"fsdp", "What does FSDP change compared with DDP, and does it train the same model?", fsdp_defaults,
       fsdp_check, fsdp_run},
      {"speed", "Why is my DDP run slower than one GPU? How many bytes does a step send, and what hides them?",
       speed_defaults, nullptr, speed_run},
  };
  return t;
}

const Topic* find_topic(const std::string& name) {
  for (const Topic& t : topics()) {
    if (name == t.name) return &t;
  }
  return nullptr;
}

}  // namespace ddplab::questions
