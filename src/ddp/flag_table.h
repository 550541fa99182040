// The one flag table (config.cc's reading, usage, to_args; every program that trains reads it): each row is a
// flag's name, its part of the usage text, how it reads and writes its Config member, and which models it
// applies to. Internal to src/ddp: programs use config.h.
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "src/ddp/config.h"
#include "src/base/flags.h"

namespace ddplab::ddp {

// Which models a flag means something for: every model, the nn.Sequential models (mlp, cnn, a spec) or
// --model gpt. A flag given for a model it does not apply to is refused, naming the model.
enum class Applies { all, sequential, gpt };

// One row of the flag table: its name, its part of the usage text ("{def}" stands for the default, the
// value of a default Config; "{choices}" for a choice flag's list), and how it reads (with its limits or
// choices) and writes its Config member.
struct FlagSpec {
  const char* name;
  const char* usage;
  std::function<void(const Flags&, Config&)> read;  // `c` holds the default when called
  std::function<std::string(const Config&)> write;  // as to_args writes it
  // Flags added after the first goldens: to_args leaves them out while they hold their default, so the
  // dumps (and hashes) of every run that does not use them stay as they were.
  bool omit_default = false;
  const std::vector<std::string>* choices = nullptr;  // a choice flag's names, for the usage text
  Applies applies = Applies::all;
};

// The flags, in the order of the usage text, of parsing and of the sequential models' to_args.
const std::vector<FlagSpec>& flag_table();
// --model gpt's to_args order (its goldens' `args`), before the flags it writes only when set.
const std::vector<std::string>& gpt_args_order();

// The choice flags' names, each list in the order of its enum.
struct ChoiceNames {
  std::vector<std::string> activation, loss, optimizer, dataset, init, average, join_divide, join_scope, zero_grad,
      gelu, no_sync_loss, sync_on, hand_sync;
};
const ChoiceNames& choice_names();
size_t index_of(const std::vector<std::string>& names, const std::string& s, const char* what);

// nanoGPT's defaults where they differ from the sequential models' (batch size, seed, learning rate, data, and
// its DDP run's seed_offset and loss / K).
void apply_gpt_defaults(Config& c);

}  // namespace ddplab::ddp
