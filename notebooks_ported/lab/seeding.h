// What seed a notebook's rank really starts from, and what the labs say about it. The seed notebooks call no
// manual_seed (001 aside): in torch 1.13 a fresh process's default CPU generator is seeded from 8 bytes of
// /dev/urandom, so every rank draws its own data. The labs fix one seed so that PyTorch can check their
// numbers, say so, and show the notebook's real behaviour with --notebook-seeding.
// notebooks_ported/lab/fresh_seeds.py checks every claim here against torch.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "src/comm/communicator.h"
#include "src/base/compare.h"

namespace ddplab::lab {

// A fresh torch 1.13 process's seed on Linux: 8 bytes read from /dev/urandom, little-endian
// (c10::detail::getNonDeterministicRandom). Throws RunError when /dev/urandom cannot be read.
uint64_t fresh_process_seed();

// The usage line of --notebook-seeding; `what` names what each rank then draws for itself.
std::string notebook_seeding_usage(const std::string& what);

// Printed by a lab that fixes a seed its notebook does not: `what` is what the notebook's ranks would each
// draw differently ("MyTrainDataset", "batch").
std::string fixed_seed_note(const std::string& what);

// One rank's seed line under --notebook-seeding.
std::string rank_seed_line(int rank, uint64_t seed);

// Every rank's `mine` (the same length on every rank), concatenated in rank order, on every rank.
std::vector<float> gather_floats(comm::Communicator& c, const std::vector<float>& mine);
std::vector<uint64_t> gather_seeds(comm::Communicator& c, uint64_t mine);
// Rank k's slice of a gather_floats result against rank 0's, as a cmp row.
CmpResult vs_rank0(const std::string& name, const std::vector<float>& all, int k, int world_size);

}  // namespace ddplab::lab
