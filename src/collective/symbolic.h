// A symbolic element for --explain: the all-reduce algorithms' own code (instantiated for Sym as for float)
// run on it records, for every element, which ranks' values it adds and in which grouping. Sym is 4 bytes,
// as a float is, so the chunk bounds (computed from byte counts) are float's.
#pragma once

#include <cstdint>
#include <string>

namespace ddplab::collective {

struct Sym {
  uint32_t id = 0;  // a node of the calling thread's expression pool
};

// Starts a fresh pool on this thread with one leaf per rank: sym_leaf(r) is rank r's value x_r.
void sym_reset(int world_size);
Sym sym_leaf(int rank);
Sym operator+(Sym a, Sym b);  // records one addition, a + b (left operand first, as the algorithm wrote it)

// A leaf: true and *rank its rank. An addition: false and its operands, left first.
bool sym_parts(Sym s, int* rank, Sym* left, Sym* right);

// "((x0 + x1) + x2)" (leaves unparenthesised); the ranks' values in the order they enter the sum.
std::string sym_text(Sym s);
// The same grouping evaluated on float values (one rounding per addition, as the algorithm rounds).
float sym_eval(Sym s, const float* values_by_rank);

}  // namespace ddplab::collective
