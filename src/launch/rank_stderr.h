// What local ranks write on stderr, relayed by their launcher (issue 19: one line per failure). Each rank's
// stderr is a pipe; the launcher forwards its lines as they come, except the lines that end a rank (those
// starting "<program>: ", printed by guarded_main), which wait until the rank has exited. Ranks that end
// with status 2 or 3 (bad input, a failed rendezvous, no backend) met what every rank meets, or its
// consequence: the first one's line is said, once. Lines of a run that failed (status 1) are all kept:
// each survivor says whom it blames.
#pragma once

#include <sys/types.h>

#include <set>
#include <string>
#include <vector>

namespace ddplab::dist {

class RankStderr {
 public:
  explicit RankStderr(int nproc);
  ~RankStderr();
  RankStderr(const RankStderr&) = delete;
  RankStderr& operator=(const RankStderr&) = delete;

  // In rank r's child before exec: its stderr becomes the pipe. In the launcher after the fork: the
  // launcher keeps only the reading end.
  void in_child(int r);
  void in_launcher(int r);
  // Waits up to `ms` for output and forwards what came.
  void pump(int ms);
  // Rank r has exited with `status` (0..3; -1 killed by a signal): its remaining output is forwarded.
  // Returns whether it said why it ended (a line of its own starting "<program>: ").
  bool ended(int r, int status);

 private:
  struct Pipe {
    int read_fd = -1, write_fd = -1;
    std::string partial;            // what came after the last newline
    std::vector<std::string> held;  // lines that end the rank, until it has
  };
  void take(Pipe& p, const char* data, size_t n);
  void line(Pipe& p, std::string l);
  void drain(Pipe& p);

  std::vector<Pipe> pipes_;
  std::set<std::string> said_;  // ending lines already said, "rank N: " aside
  bool shared_said_ = false;    // a line of a rank that ended with status 2 or 3 has been said
  std::string prefix_;          // "<program>: "
};

}  // namespace ddplab::dist
