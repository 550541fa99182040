#include "src/device/graph.h"

#include <algorithm>
#include <stdexcept>

#include "src/base/errors.h"
#include "src/model/shape_layers.h"
#include "src/model/linear.h"

namespace ddplab::device {

// What a node's backward shares with the graph: where parameters, gradients and the scratch live, and
// whether gradients are assigned or added.
struct Context {
  Ops& ops;
  Kernels kernels;
  float *p, *g, *scratch;
  bool accumulate;
};

class Node {
 public:
  virtual ~Node() = default;
  // out = f(x) for `batch` samples; x stays valid and unchanged until backward.
  virtual void forward(const float* x, int64_t batch) = 0;
  // g: dL/d(out), which the node may overwrite. Returns dL/dx (in gx, or in g's memory), or nullptr when
  // !need_grad_input.
  virtual float* backward(float* g, float* gx, int64_t batch, bool need_grad_input, std::vector<Parameter*>& ready) = 0;
  virtual bool has_parameters() const { return false; }

  int64_t in_width = 0, out_width = 0;
  float* out = nullptr;  // [max_batch, out_width]
};

namespace {

// Linear::forward / Linear::backward (src/model/linear.cc): grad_weight, grad_bias, then grad_input; autograd's
// AccumulateGrad runs the bias's before the weight's.
class LinearNode : public Node {
 public:
  LinearNode(Linear& l, const Context& ctx, size_t weight_offset, size_t bias_offset)
      : l_(l), ctx_(ctx), w_(weight_offset), b_(bias_offset) {
    in_width = l.in_features;
    out_width = l.out_features;
  }
  void forward(const float* x, int64_t batch) override {
    x_ = x;
    ctx_.ops.linear_forward(ctx_.kernels, x, ctx_.p + w_, ctx_.p + b_, out, batch, in_width, out_width);
  }
  float* backward(float* g, float* gx, int64_t batch, bool need_grad_input, std::vector<Parameter*>& ready) override {
    Ops& ops = ctx_.ops;
    const Kernels k = ctx_.kernels;
    if (!ctx_.accumulate) {
      ops.linear_grad_weight(k, g, x_, ctx_.g + w_, batch, in_width, out_width);
      ops.linear_grad_bias(k, g, ctx_.g + b_, batch, out_width);
    } else {  // the micro-batch's gradient apart, then added: weight.grad += g
      ops.linear_grad_weight(k, g, x_, ctx_.scratch, batch, in_width, out_width);
      ops.add(ctx_.g + w_, ctx_.scratch, static_cast<size_t>(out_width * in_width));
      ops.linear_grad_bias(k, g, ctx_.scratch, batch, out_width);
      ops.add(ctx_.g + b_, ctx_.scratch, static_cast<size_t>(out_width));
    }
    ready.push_back(&l_.bias);
    ready.push_back(&l_.weight);
    if (!need_grad_input) return nullptr;
    ops.linear_grad_input(k, g, ctx_.p + w_, gx, batch, in_width, out_width);
    return gx;
  }
  bool has_parameters() const override { return true; }

 private:
  Linear& l_;
  const Context& ctx_;
  size_t w_, b_;
  const float* x_ = nullptr;
};

// ReLU (src/model/shape_layers.h): max(x, 0); threshold_backward in place on the gradient.
class ReLUNode : public Node {
 public:
  ReLUNode(int64_t width, Ops& ops) : ops_(ops) { in_width = out_width = width; }
  void forward(const float* x, int64_t batch) override {
    pre_ = x;
    ops_.relu_forward(x, out, static_cast<size_t>(batch * out_width));
  }
  float* backward(float* g, float*, int64_t batch, bool need_grad_input, std::vector<Parameter*>&) override {
    if (!need_grad_input) return nullptr;
    ops_.relu_backward(pre_, g, static_cast<size_t>(batch * out_width));
    return g;
  }

 private:
  Ops& ops_;
  const float* pre_ = nullptr;
};

}  // namespace

std::string missing_node(const Sequential& model) {
  for (size_t i = 0; i < model.size(); ++i) {
    const Module& c = model[i];
    if (dynamic_cast<const Linear*>(&c) || dynamic_cast<const ReLU*>(&c)) continue;
    return "layer \"" + model.child_name(i) + "\": " + c.repr();
  }
  return "";
}

Graph::~Graph() = default;

Graph::Graph(Sequential& model, Ops& ops, Kernels kernels, int64_t in_width, int64_t max_batch, bool accumulates) {
  if (std::string missing = missing_node(model); !missing.empty()) {
    throw UsageError("the device graph runs Linear and ReLU layers only (got " + missing + ")");
  }
  params_ = model.parameters();
  size_t largest = 0;
  for (const Parameter* p : params_) {
    offset_.push_back(total_);
    total_ += static_cast<size_t>(p->numel());
    largest = std::max(largest, static_cast<size_t>(p->numel()));
  }
  p_ = ops.alloc(total_);
  g_ = ops.alloc(total_);
  if (accumulates) scratch_ = ops.alloc(largest);  // a micro-batch's gradient before accumulation
  ctx_ = std::make_unique<Context>(Context{ops, kernels, p_, g_, scratch_, false});
  const auto B = static_cast<size_t>(max_batch);
  int64_t width = in_width, widest = in_width;
  size_t param = 0;
  for (size_t i = 0; i < model.size(); ++i) {
    std::unique_ptr<Node> node;
    if (auto* l = dynamic_cast<Linear*>(&model[i])) {
      if (l->in_features != width) {
        throw UsageError("the device graph: layer \"" + model.child_name(i) + "\" takes " +
                         std::to_string(l->in_features) + " features, its input has " + std::to_string(width));
      }
      node = std::make_unique<LinearNode>(*l, *ctx_, offset_[param], offset_[param + 1]);
      param += 2;
    } else {
      node = std::make_unique<ReLUNode>(width, ops);
    }
    width = node->out_width;
    widest = std::max(widest, width);
    node->out = ops.alloc(B * static_cast<size_t>(width));
    nodes_.push_back(std::move(node));
  }
  out_width_ = width;
  for (float*& buf : gy_) buf = ops.alloc(B * static_cast<size_t>(widest));
  bool before = false;
  for (const auto& n : nodes_) {
    need_grad_input_.push_back(before);
    before = before || n->has_parameters();
  }
}

const float* Graph::forward(const float* x, int64_t batch) {
  for (const auto& n : nodes_) {
    n->forward(x, batch);
    x = n->out;
  }
  return x;
}

void Graph::backward(int64_t batch, std::vector<Parameter*>& ready) {
  if (has_grad_ && !scratch_) throw std::logic_error("Graph::backward: a second backward needs accumulates=true");
  ctx_->accumulate = has_grad_;
  float* g = gy_[0];
  for (size_t i = nodes_.size(); i-- > 0;) {
    float* gx = g == gy_[0] ? gy_[1] : gy_[0];
    g = nodes_[i]->backward(g, gx, batch, need_grad_input_[i], ready);
    if (!g) break;  // nothing before this node has parameters
  }
  has_grad_ = true;
}

}  // namespace ddplab::device
