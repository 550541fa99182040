#include "notebooks_ported/lab/seeding.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include <fmt/format.h>

#include "src/base/errors.h"
#include "src/data/torch_rng.h"

namespace ddplab::lab {

uint64_t fresh_process_seed() {
  const int fd = open("/dev/urandom", O_RDONLY | O_CLOEXEC);
  if (fd < 0) throw RunError(std::string("--notebook-seeding: cannot open /dev/urandom: ") + std::strerror(errno));
  unsigned char b[8];
  const ssize_t n = read(fd, b, sizeof b);
  close(fd);
  if (n != static_cast<ssize_t>(sizeof b)) throw RunError("--notebook-seeding: cannot read 8 bytes from /dev/urandom");
  uint64_t seed = 0;
  for (int i = 7; i >= 0; --i) seed = (seed << 8) | b[i];  // torch reads a uint64_t: little-endian on x86-64
  return seed;
}

std::string notebook_seeding_usage(const std::string& what) {
  return fmt::format(
      "  --notebook-seeding        seed as the notebook does, i.e. not at all: each rank its own random seed (as a\n"
      "                            fresh torch process: 8 bytes of /dev/urandom), printed; {}\n",
      what);
}

std::string fixed_seed_note(const std::string& what) {
  return fmt::format(
      "About seeds: the notebook calls no torch.manual_seed. In PyTorch each rank is a fresh process whose\n"
      "generator starts from its own random seed (8 bytes of /dev/urandom), so each rank draws its own\n"
      "{}.\n"
      "This lab fixes a seed the notebook does not: {} (a new torch.Generator()'s) on every\n"
      "rank, so that its numbers can be checked against PyTorch's. --notebook-seeding runs it as the notebook does.",
      what, kDefaultSeed);
}

std::string rank_seed_line(int rank, uint64_t seed) {
  return fmt::format("[rank{}] seed {} (its own: no manual_seed, as in the notebook)", rank, seed);
}

std::vector<float> gather_floats(comm::Communicator& c, const std::vector<float>& mine) {
  std::vector<float> all(mine.size() * static_cast<size_t>(c.world_size()));
  c.all_gather(mine.data(), mine.size() * sizeof(float), all.data());
  return all;
}

std::vector<uint64_t> gather_seeds(comm::Communicator& c, uint64_t mine) {
  std::vector<uint64_t> all(static_cast<size_t>(c.world_size()));
  c.all_gather(&mine, sizeof mine, all.data());
  return all;
}

CmpResult vs_rank0(const std::string& name, const std::vector<float>& all, int k, int world_size) {
  const size_t n = all.size() / static_cast<size_t>(world_size);
  return cmp(name, all.data() + n * static_cast<size_t>(k), all.data(), static_cast<int64_t>(n));
}

}  // namespace ddplab::lab
