// Autograd's AccumulateGrad, derived from the Module tree instead of written out per model.
//
// Every leaf Module records, in its forward, that it used each of its Parameters (count_use: an edge from
// the graph to the parameter's AccumulateGrad node), and hands the gradient of that use back in its
// backward (add_grad). Torch's engine runs a leaf's AccumulateGrad once, when all its inputs have arrived:
// the gradients of a tensor used by several modules (nanoGPT's lm_head.weight, which IS
// transformer.wte.weight) are summed in its InputBuffer in the order they arrive (first + second + ...),
// and only that sum is assigned to / added into .grad. So: while another user's gradient is outstanding, a
// gradient is added into Parameter::pending; the last one is added too, the sum accumulated into .grad,
// and the parameter appended to `ready` (the order DDP's Reducer records). A parameter with one user (every
// parameter of the MLP and CNN models) is accumulated and ready at once, as before.
//
// A module backpropagates only its last forward (it keeps only that one's input), so a forward that no
// backward consumed (eval, sampling) is replaced by the next: a module is recorded once however often it
// runs. The model's outermost forward on a thread (GraphScope) also forgets users left from such forwards,
// as torch frees a graph nobody backpropagated.
#pragma once

#include <vector>

#include "src/tensor/tensor.h"

namespace ddplab {

class Module;

// Forward: `user` used p; its backward will send a gradient.
void count_use(Parameter& p, const Module& user);

// Backward: the gradient of user's use of p (p.numel() floats in p's element order). Appends p to `ready`
// when no other user's gradient is outstanding (also when p was never counted).
void add_grad(Parameter& p, const Module& user, const float* g, std::vector<Parameter*>& ready);
inline void add_grad(Parameter& p, const Module& user, const Matrix& g, std::vector<Parameter*>& ready) {
  add_grad(p, user, g.data(), ready);
}

// Where the gradient of user's use of p may be written straight away: p.grad (sized like p) when autograd
// would assign it there (no .grad yet, nothing pending, no other user outstanding); otherwise nullptr, and
// the caller computes the gradient elsewhere and calls add_grad. After writing there, call grad_written.
float* direct_grad(Parameter& p, const Module& user);
void grad_written(Parameter& p, const Module& user, std::vector<Parameter*>& ready);

// The outermost forward of `root` on this thread forgets the users earlier forwards left on root's
// parameters; forwards nested inside it (children, a Sequential in a Sequential) change nothing.
class GraphScope {
 public:
  explicit GraphScope(Module& root);
  ~GraphScope();
  GraphScope(const GraphScope&) = delete;
  GraphScope& operator=(const GraphScope&) = delete;
};

}  // namespace ddplab
