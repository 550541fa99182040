// --explain: Gloo's ring all-reduce on one small gradient, message by message, and where its result
// stops being bitwise equal to the rank-order sum.
#pragma once

#include <string>
#include <vector>

namespace ddplab {

// inputs[r] = rank r's values (already multiplied by 1/world_size if predivide). `name` labels them.
std::string explain_ring(const std::string& name, const std::vector<std::vector<float>>& inputs);

// Distance in units in the last place between two finite floats (0 when bitwise equal).
int64_t ulp_distance(float a, float b);

}  // namespace ddplab
