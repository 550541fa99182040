// The project's kinds of failure, apart from the flag parser so that any layer can throw them: bad input
// (UsageError: one line, exit status 2), a run that failed (RunError: one line, exit status 1), and a run whose
// numbers became NaN or inf (NonFiniteError: one line, exit status 4).
// guarded_main (flags.h) turns them into those lines and statuses.
#pragma once

#include <stdexcept>

namespace ddplab {

struct UsageError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

// A run that failed (a collective that timed out, a rank that died). Kinds of it live where they arise
// (comm::CommError), so this core header depends on none of them.
struct RunError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

// A run that diverged: its numbers became NaN or inf (the message says where first). Nothing is built from them.
struct NonFiniteError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

}  // namespace ddplab
