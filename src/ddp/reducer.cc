#include "src/ddp/reducer.h"

#include <algorithm>

#include <fmt/format.h>

namespace ddplab::ddp {

std::vector<std::vector<size_t>> assign_buckets(const std::vector<size_t>& order, const std::vector<size_t>& bytes,
                                                const std::vector<size_t>& limits) {
  std::vector<std::vector<size_t>> result;
  std::vector<size_t> open;
  size_t open_bytes = 0, limit = 0;
  for (size_t idx : order) {
    open.push_back(idx);
    open_bytes += bytes[idx];
    if (open_bytes >= limits[limit]) {
      result.push_back(open);
      open.clear();
      open_bytes = 0;
      limit = std::min(limit + 1, limits.size() - 1);
    }
  }
  if (!open.empty()) result.push_back(open);
  return result;
}

Reducer::Reducer(std::vector<Parameter*> params, int64_t world_size, double bucket_cap_mb, Average average)
    : params_(std::move(params)),
      world_size_(world_size),
      cap_bytes_(static_cast<size_t>(bucket_cap_mb * 1024 * 1024)),
      average_(average),
      div_factor_(world_size),
      aliased_(params_.size(), false),
      local_unused_(params_.size(), false),
      global_unused_(params_.size(), false) {
  // Iteration 0: bucket_size_limits = [sys.maxsize], i.e. one bucket, parameters in model order.
  std::vector<size_t> all(params_.size());
  for (size_t i = 0; i < all.size(); ++i) all[i] = i;
  set_buckets({all});
}

void Reducer::set_buckets(const std::vector<std::vector<size_t>>& assignment) {
  buckets_.clear();
  for (const auto& indices : assignment) {
    Bucket b;
    b.params = indices;
    for (size_t i : indices) {
      b.offsets.push_back(b.numel);
      b.numel += static_cast<size_t>(params_[i]->numel());
    }
    buckets_.push_back(b);
  }
}

size_t Reducer::max_bucket_numel() const {
  size_t m = 0;
  for (const Bucket& b : buckets_) m = std::max(m, b.numel);
  return m;
}

bool Reducer::scales_in() const {
  return !(hook_ || average_ == Average::postdivide || average_ == Average::multiply ||
           average_ == Average::divide_first || (average_ == Average::avg && backend_averages_));
}

GradBucket Reducer::grad_bucket(size_t b, float* flat) const {
  const Bucket& bucket = buckets_[b];
  GradBucket g;
  g.index = b;
  g.is_last = b + 1 == buckets_.size();
  g.buffer = flat;
  g.numel = bucket.numel;
  g.offsets = bucket.offsets;
  for (size_t i : bucket.params) {
    g.shapes.push_back(params_[i]->shape);
    g.names.push_back(params_[i]->name);
  }
  return g;
}

void Reducer::set_unused(std::vector<bool> local_unused, std::vector<bool> global_unused) {
  local_unused_ = std::move(local_unused);
  global_unused_ = std::move(global_unused);
  local_unused_.resize(params_.size(), false);
  global_unused_.resize(params_.size(), false);
}

void Reducer::prepare_bucket(size_t b, float* buf) const { prepare_bucket(b, buf, {0, buckets_[b].numel}); }
void Reducer::finalize_bucket(size_t b, float* buf) { finalize_bucket(b, buf, {0, buckets_[b].numel}); }

void Reducer::prepare_bucket(size_t b, float* buf, collective::Span span) const {
  const Bucket& bucket = buckets_[b];
  // at::mul_out(bucket_view, grad, 1.0 / world_size): a float multiply by the rounded reciprocal.
  const float scale = prepare_scale();
  const bool copy = !scales_in();
  const auto ws = static_cast<float>(div_factor_);
  if (joined_) {
    std::fill(buf, buf + (span.hi - span.lo), 0.0f);
    return;
  }
  for (size_t j = 0; j < bucket.params.size(); ++j) {
    const size_t i = bucket.params[j];
    const Parameter& p = *params_[i];
    const size_t off = bucket.offsets[j];
    const size_t lo = std::max(off, span.lo), hi = std::min(off + static_cast<size_t>(p.numel()), span.hi);
    if (!p.has_grad) {
      if (!local_unused_[i]) {
        throw std::logic_error("parameter " + p.name + " has no gradient: DDP needs every parameter used");
      }
      if (lo < hi) std::fill(buf + (lo - span.lo), buf + (hi - span.lo), 0.0f);
      continue;
    }
    if (lo >= hi) continue;
    const float* g = p.grad.data() + (lo - off);
    float* dst = buf + (lo - span.lo);
    if (copy && divides_in()) {
      for (size_t k = 0; k < hi - lo; ++k) dst[k] = g[k] / ws;
    } else if (copy) {
      std::copy(g, g + (hi - lo), dst);
    } else if (aliased_[i]) {
      for (size_t k = 0; k < hi - lo; ++k) dst[k] = g[k] / ws;
    } else {
      for (size_t k = 0; k < hi - lo; ++k) dst[k] = g[k] * scale;
    }
  }
}

void Reducer::finalize_bucket(size_t b, float* buf, collective::Span span) {
  const Bucket& bucket = buckets_[b];
  if (joined_) return;  // the shadowing all-reduce's result is not used
  if (postdivides()) {
    const auto ws = static_cast<float>(world_size_);
    for (size_t k = 0; k < span.hi - span.lo; ++k) buf[k] = buf[k] / ws;
  } else if (multiplies_out()) {
    const float scale = prepare_scale();
    for (size_t k = 0; k < span.hi - span.lo; ++k) buf[k] = buf[k] * scale;
  }
  for (size_t j = 0; j < bucket.params.size(); ++j) {
    const size_t i = bucket.params[j];
    Parameter& p = *params_[i];
    if (global_unused_[i]) continue;  // no rank used it: its .grad stays as it was (None stays None)
    if (!p.has_grad) {                // locally unused, used elsewhere: the grad is created from the bucket
      p.grad = Matrix::Zero(p.value.rows(), p.value.cols());
      p.has_grad = true;
    }
    if (gradient_as_bucket_view_) aliased_[i] = true;
    const size_t off = bucket.offsets[j];
    const size_t lo = std::max(off, span.lo), hi = std::min(off + static_cast<size_t>(p.numel()), span.hi);
    if (lo < hi) std::copy(buf + (lo - span.lo), buf + (hi - span.lo), p.grad.data() + (lo - off));
  }
}

void Reducer::finish_sync(const std::vector<Parameter*>& ready) {
  if (rebuilt_) return;
  rebuilt_ = true;
  // rebuilt_params_ in reducer.cpp: the order in which autograd marked gradients ready (for a chain of
  // Linears the reverse of parameters(): last layer first, bias before weight; a Conv2d or BatchNorm
  // marks its weight first). No re-sorting: ready order is kept.
  std::vector<size_t> order, bytes(params_.size());
  std::vector<bool> seen(params_.size(), false);
  for (const Parameter* p : ready) {
    for (size_t i = 0; i < params_.size(); ++i) {
      if (params_[i] == p && !seen[i]) {
        seen[i] = true;
        order.push_back(i);
      }
    }
  }
  for (size_t i = params_.size(); i-- > 0;) {
    if (!seen[i]) order.push_back(i);
  }
  for (size_t i = 0; i < params_.size(); ++i) bytes[i] = static_cast<size_t>(params_[i]->numel()) * sizeof(float);
  set_buckets(assign_buckets(order, bytes, {first_bucket_bytes_, cap_bytes_}));
}

void Reducer::use_size_limited_initial_buckets() {
  std::vector<size_t> order(params_.size()), bytes(params_.size());
  for (size_t i = 0; i < params_.size(); ++i) {
    order[i] = i;
    bytes[i] = static_cast<size_t>(params_[i]->numel()) * sizeof(float);
  }
  std::vector<std::vector<size_t>> assignment = assign_buckets(order, bytes, {first_bucket_bytes_, cap_bytes_});
  std::reverse(assignment.begin(), assignment.end());
  set_buckets(assignment);
}

std::string Reducer::describe() const {
  std::string out;
  for (size_t b = 0; b < buckets_.size(); ++b) {
    std::vector<std::string> names;
    for (size_t i : buckets_[b].params) names.push_back(params_[i]->name);
    out += fmt::format("{}[{}] {} floats", b ? "; " : "", fmt::join(names, " "), buckets_[b].numel);
  }
  return out;
}

}  // namespace ddplab::ddp
