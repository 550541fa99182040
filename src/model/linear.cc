#include "src/model/linear.h"

#include <cmath>
#include <sstream>
#include <stdexcept>

namespace ddplab {

std::string torch_size(const std::vector<int64_t>& shape) {
  std::ostringstream os;
  os << "torch.Size([";
  for (size_t i = 0; i < shape.size(); ++i) os << (i ? ", " : "") << shape[i];
  os << "])";
  return os.str();
}

Linear::Linear(int64_t in, int64_t out, const std::string& prefix, Generator& gen, bool reset_parameters,
               bool has_bias)
    : in_features(in), out_features(out), has_bias_(has_bias) {
  weight.name = prefix + ".weight";
  weight.shape = {out, in};
  weight.value.resize(out, in);
  bias.name = prefix + ".bias";
  bias.shape = {out};
  bias.value.resize(out, 1);
  if (!reset_parameters) {
    weight.value.setZero();
    bias.value.setZero();
    return;
  }
  // kaiming_uniform_(a=sqrt(5)) in Python doubles: a**2 is 5.000000000000001, not 5.
  const double a = std::sqrt(5.0);
  const double gain = std::sqrt(2.0 / (1.0 + a * a));
  const double std = gain / std::sqrt(static_cast<double>(in));
  const double bound = std::sqrt(3.0) * std;
  gen.uniform_(weight.data(), weight.numel(), -bound, bound);
  if (!has_bias_) {
    bias.value.setZero();
    return;
  }
  const double bias_bound = in > 0 ? 1.0 / std::sqrt(static_cast<double>(in)) : 0.0;
  gen.uniform_(bias.data(), bias.numel(), -bias_bound, bias_bound);
}

Matrix Linear::forward(const Matrix& x) {
  input_ = x;
  Matrix y(x.rows(), out_features);
  kernels->forward(x.data(), weight.data(), bias.data(), y.data(), x.rows(), in_features, out_features);
  return y;
}

Matrix Linear::backward(const Matrix& grad_out, bool need_grad_input) {
  const int64_t batch = grad_out.rows();
  // grad_weight = grad_out^T x, written straight into .grad the first time (autograd assigns), summed
  // into it afterwards (autograd accumulates: old + new).
  if (!weight.has_grad) {
    weight.grad.resize(out_features, in_features);
    kernels->grad_weight(grad_out.data(), input_.data(), weight.grad.data(), batch, in_features, out_features);
    weight.has_grad = true;
  } else {
    Matrix g(out_features, in_features);
    kernels->grad_weight(grad_out.data(), input_.data(), g.data(), batch, in_features, out_features);
    weight.grad += g;
  }
  Matrix gb(out_features, 1);  // grad_out.sum(0)
  kernels->grad_bias(grad_out.data(), gb.data(), batch, out_features);
  bias.accumulate_grad(gb);
  if (!need_grad_input) return Matrix();
  Matrix grad_in(batch, in_features);
  kernels->grad_input(grad_out.data(), weight.data(), grad_in.data(), batch, in_features, out_features);
  return grad_in;
}

Tensor Linear::forward(const Tensor& x) {
  if (x.shape.size() < 2 || x.shape.back() != in_features) {
    throw std::invalid_argument("Linear(" + std::to_string(in_features) + ", ...) got input " + torch_size(x.shape));
  }
  Parameter& w = effective_weight();
  const int64_t rows = x.numel() / in_features;
  input_ = x.value;
  input_shape_ = x.shape;
  std::vector<int64_t> shape = x.shape;
  shape.back() = out_features;
  Tensor y = Tensor::empty(shape);
  kernels->forward(x.data(), w.data(), bias.data(), y.data(), rows, in_features, out_features);
  count_use(w, *this);
  if (has_bias_) count_use(bias, *this);
  return y;
}

Tensor Linear::backward(const Tensor& grad_out, bool need_grad_input, std::vector<Parameter*>& ready) {
  Parameter& w = effective_weight();
  const int64_t rows = grad_out.numel() / out_features;
  // grad_weight = grad_out^T x: written straight into .grad when autograd assigns it, else summed in.
  float* gw = direct_grad(w, *this);
  const bool direct = gw != nullptr;
  if (!direct) {
    grad_scratch_.resize(out_features, in_features);
    gw = grad_scratch_.data();
  }
  kernels->grad_weight(grad_out.data(), input_.data(), gw, rows, in_features, out_features);
  if (has_bias_) {  // AccumulateGrad runs the bias's before the weight's
    Matrix gb(out_features, 1);  // grad_out.sum(0)
    kernels->grad_bias(grad_out.data(), gb.data(), rows, out_features);
    add_grad(bias, *this, gb, ready);
  }
  if (direct) {
    grad_written(w, *this, ready);
  } else {
    add_grad(w, *this, gw, ready);
  }
  if (!need_grad_input) return Tensor();
  Tensor grad_in = Tensor::empty(input_shape_);
  kernels->grad_input(grad_out.data(), w.data(), grad_in.data(), rows, in_features, out_features);
  return grad_in;
}

std::vector<Parameter*> Linear::parameters() {
  if (!has_bias_) return {&effective_weight()};
  return {&effective_weight(), &bias};
}

std::vector<std::string> Linear::state_dict_keys() {
  if (!has_bias_) return {weight.name};
  return {weight.name, bias.name};
}

void Linear::tie_weight(Parameter& shared) {
  if (shared.value.rows() != out_features || shared.value.cols() != in_features) {
    throw std::invalid_argument(weight.name + ": cannot tie to " + shared.name + " of another shape");
  }
  tied_ = &shared;
  weight.value = Matrix();  // its draws are spent; only the name (the state_dict key) is kept
  weight.has_grad = false;
}

std::string Linear::repr() const {
  return "Linear(in_features=" + std::to_string(in_features) + ", out_features=" + std::to_string(out_features) +
         ", bias=" + (has_bias_ ? "True" : "False") + ")";
}

MLP::MLP(const std::vector<int64_t>& sizes, bool relu_between, const std::vector<std::string>& layer_names,
         Generator& gen)
    : relu(relu_between) {
  if (sizes.size() < 2 || layer_names.size() != sizes.size() - 1) {
    throw std::invalid_argument("MLP needs n >= 2 sizes and n - 1 layer names");
  }
  linears.reserve(sizes.size() - 1);
  for (size_t i = 0; i + 1 < sizes.size(); ++i) {
    linears.emplace_back(sizes[i], sizes[i + 1], layer_names[i], gen);
  }
}

std::vector<std::string> MLP::sequential_names(size_t num_linear, bool relu, const std::string& prefix) {
  std::vector<std::string> names;
  for (size_t i = 0; i < num_linear; ++i) {
    names.push_back(prefix + "." + std::to_string(relu ? 2 * i : i));
  }
  return names;
}

Matrix MLP::forward(const Matrix& x) {
  relu_masks_.clear();
  Matrix h = x;
  for (size_t i = 0; i < linears.size(); ++i) {
    h = linears[i].forward(h);
    if (relu && i + 1 < linears.size()) {
      relu_masks_.push_back(h);  // pre-activation
      h = h.cwiseMax(0.0f);
    }
  }
  return h;
}

void MLP::backward(const Matrix& grad_out) {
  Matrix g = grad_out;
  for (size_t i = linears.size(); i-- > 0;) {
    if (relu && i + 1 < linears.size()) {
      // threshold_backward: gradient where the pre-activation was > 0, exactly 0 elsewhere.
      g = (relu_masks_[i].array() > 0.0f).select(g, 0.0f);
    }
    g = linears[i].backward(g, /*need_grad_input=*/i > 0);
  }
}

void MLP::zero_grad(bool set_to_none) {
  for (Parameter* p : parameters()) {
    p->zero_grad(set_to_none);
  }
}

std::vector<Parameter*> MLP::parameters() {
  std::vector<Parameter*> ps;
  for (Linear& l : linears) {
    ps.push_back(&l.weight);
    ps.push_back(&l.bias);
  }
  return ps;
}

std::vector<const Parameter*> MLP::parameters() const {
  std::vector<const Parameter*> ps;
  for (const Linear& l : linears) {
    ps.push_back(&l.weight);
    ps.push_back(&l.bias);
  }
  return ps;
}

}  // namespace ddplab
