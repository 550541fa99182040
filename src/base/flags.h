// A small command-line parser with the project's bad-input rule: every problem becomes one UsageError
// line naming the flag and its limit; programs print it and exit with status 2.
#pragma once

#include <cstdint>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "src/base/errors.h"

namespace ddplab {

class Flags {
 public:
  // Accepts "--name value" and "--name=value"; anything else not starting with "--" is positional.
  // `known` lists every flag the program takes: any other flag is an error. Flags in `bare` may stand
  // alone ("--quiet"), meaning "true"; they still accept "--quiet false".
  Flags(int argc, char** argv, const std::set<std::string>& known, const std::set<std::string>& bare = {});

  bool has(const std::string& name) const { return values_.count(name) > 0; }
  bool help() const { return help_; }
  const std::vector<std::string>& positional() const { return positional_; }

  int64_t get_int(const std::string& name, int64_t def, int64_t min, int64_t max) const;
  double get_double(const std::string& name, double def, double min, double max) const;
  bool get_bool(const std::string& name, bool def) const;  // true|false|1|0
  std::string get_string(const std::string& name, const std::string& def) const;
  std::string get_choice(const std::string& name, const std::string& def,
                         const std::vector<std::string>& choices) const;
  std::vector<int64_t> get_int_list(const std::string& name, const std::vector<int64_t>& def, int64_t min,
                                    int64_t max) const;  // "6,4,2"

 private:
  std::map<std::string, std::string> values_;
  std::vector<std::string> positional_;
  bool help_ = false;
};

// main() for every program: runs `run`; bad input (UsageError and its kinds) becomes one line on stderr
// and status 2; a failed run (RunError, e.g. comm::CommError), an allocation that failed, or any other
// exception one line and status 1.
int guarded_main(const char* program, int argc, char** argv, int (*run)(int, char**));

// `text` with its control bytes escaped (\n, \t, \r, \\x1b, ...; C1 controls too), for one-line messages that
// echo what a user or a peer gave: a newline cannot split the line, a terminal escape cannot reach stderr raw.
std::string escape_control(const std::string& text);

// `text` (a command-line argument, a line) with the password of every redis://USER:PASSWORD@ URL in it shown
// as ***: what is echoed into a report, a dump, a trace or a log line never holds a secret.
std::string hide_passwords(const std::string& text);

// Parses a whole decimal integer or throws UsageError("<what> must be an integer (got 'x')").
int64_t parse_int(const std::string& what, const std::string& text);
// Throws UsageError("--<name> must be in [min, max] (got v)") when v is outside: Flags::get_int's limit, for a
// flag whose limit is known only later (--fault-rank: the run's world size).
void check_range(const std::string& name, int64_t v, int64_t min, int64_t max);

}  // namespace ddplab
