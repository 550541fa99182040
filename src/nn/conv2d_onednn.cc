// aten::mkldnn_convolution and mkldnn_convolution_backward (aten/src/ATen/native/mkldnn/Conv.cpp) as torch
// 1.13 runs them for contiguous NCHW float32 tensors, through ideep (Debian's libideep-dev
// 0.0~git20220817.77d662b, include/ideep/operators/conv.hpp) on Debian's libdnnl.so.2 (oneDNN 2.6.3), the
// library torch itself links. We ask oneDNN exactly what ideep asks:
//  forward       convolution_forward::desc(prop_kind::forward, convolution_direct, src, weights[, bias], dst,
//                strides, dilates 0, padding l = r), every memory desc format_tag::any, attr scratchpad
//                mode user (compute_v3 -> compute_dispatch_v2); the bias fused.
//  grad_input    convolution_backward_data::desc(convolution_direct, diff_src, weights, diff_dst, ...) with
//                format any, attr scratchpad user, hinted by a forward pd (no bias, default attr).
//  grad_weight   convolution_backward_weights::desc(convolution_direct, src, diff_weights[, diff_bias],
//                diff_dst, ...) format any, scratchpad user, hinted by a forward pd with the bias exactly
//                when diff_bias is asked for (compute_v2 with or without diff_bias).
// oneDNN takes the first implementation that accepts the descriptors; with the same library, CPU, thread
// count and descriptors it picks the same kernel and blocked layouts as inside torch. Everything else is
// a reorder between the plain NCHW/OIHW buffers and those layouts, an exact copy.
//
// Threads: Debian builds libdnnl on OpenMP; torch.set_num_threads(1) is omp_set_num_threads(1). Kernel
// choice and summation order depend on omp_get_max_threads() when a primitive is created and run, so every
// entry point sets it to 1 for the calling thread (libgomp keeps it per thread, so replicas running on
// several threads each get their own one-thread oneDNN). Primitives are cached per thread; the scratchpad
// is ours (user mode), so nothing is shared between threads but oneDNN's own thread-safe caches.
#include <omp.h>

#include <map>
#include <memory>
#include <tuple>
#include <unordered_map>
#include <vector>

#include "oneapi/dnnl/dnnl.hpp"
#include "src/nn/conv2d_impl.h"

namespace ddplab::nn::detail {
namespace {

using dnnl::memory;
using tag = memory::format_tag;
constexpr auto f32 = memory::data_type::f32;

dnnl::engine& cpu_engine() {
  static dnnl::engine engine(dnnl::engine::kind::cpu, 0);  // ideep's engine::cpu_engine()
  return engine;
}

// A buffer in the layout a primitive wants, or the caller's plain buffer when that layout is the plain one.
struct Operand {
  memory::desc plain, want;
  std::vector<float> storage;  // only when want != plain
  bool reorder() const { return !(plain == want); }
  void init(const memory::desc& p, const memory::desc& w) {
    plain = p;
    want = w;
    if (reorder()) storage.assign(w.get_size() / sizeof(float), 0.0f);
  }
  // A memory over the wanted layout holding `user` (copied in when `in`).
  memory bind(float* user, bool in, dnnl::stream& strm) {
    if (!reorder()) return memory(want, cpu_engine(), user);
    memory mine(want, cpu_engine(), storage.data());
    if (in) {
      memory theirs(plain, cpu_engine(), user);
      dnnl::reorder(theirs, mine).execute(strm, theirs, mine);
    }
    return mine;
  }
  void copy_out(memory& mine, float* user, dnnl::stream& strm) {
    if (!reorder()) return;
    memory theirs(plain, cpu_engine(), user);
    dnnl::reorder(mine, theirs).execute(strm, mine, theirs);
  }
};

struct Dims {
  memory::dims src, weights, bias, dst, strides, dilates, padding;
  explicit Dims(const Conv2dShape& s)
      : src{s.n, s.c_in, s.h, s.w},
        weights{s.c_out, s.c_in, s.kernel, s.kernel},
        bias{s.c_out},
        dst{s.n, s.c_out, s.out_h(), s.out_w()},
        strides{s.stride, s.stride},
        dilates{0, 0},  // ideep's get_compatible_dilates: torch's dilation 1 is oneDNN's 0
        padding{s.padding, s.padding} {}
  memory::desc any(const memory::dims& d) const { return memory::desc(d, f32, tag::any); }
};

dnnl::primitive_attr user_scratchpad() {
  dnnl::primitive_attr attr;
  attr.set_scratchpad_mode(dnnl::scratchpad_mode::user);
  return attr;
}

// convolution_forward::get_primitive_desc as ideep calls it (keep_format false: all formats any).
dnnl::convolution_forward::primitive_desc forward_pd(const Dims& d, bool with_bias, const dnnl::primitive_attr& attr) {
  using fwd = dnnl::convolution_forward;
  const auto desc =
      with_bias ? fwd::desc(dnnl::prop_kind::forward, dnnl::algorithm::convolution_direct, d.any(d.src),
                            d.any(d.weights), d.any(d.bias), d.any(d.dst), d.strides, d.dilates, d.padding, d.padding)
                : fwd::desc(dnnl::prop_kind::forward, dnnl::algorithm::convolution_direct, d.any(d.src),
                            d.any(d.weights), d.any(d.dst), d.strides, d.dilates, d.padding, d.padding);
  return fwd::primitive_desc(desc, attr, cpu_engine());
}

enum class Op { kForward, kBackwardData, kBackwardWeights };

// One primitive and its operands for one shape, op and bias flag, kept per thread.
struct Plan {
  dnnl::primitive prim;
  Operand a, b, c, d;  // forward: src, weights, bias, dst; data: diff_dst, weights, -, diff_src;
                       // weights: src, diff_dst, diff_bias, diff_weights
  std::vector<char> scratchpad;
  memory::desc scratchpad_desc;
};

Plan make_plan(const Conv2dShape& s, Op op, bool with_bias) {
  const Dims d(s);
  const memory::desc src(d.src, f32, tag::nchw), wei(d.weights, f32, tag::oihw), bias(d.bias, f32, tag::a),
      dst(d.dst, f32, tag::nchw);
  Plan p;
  if (op == Op::kForward) {
    const auto pd = forward_pd(d, with_bias, user_scratchpad());
    p.a.init(src, pd.src_desc());
    p.b.init(wei, pd.weights_desc());
    if (with_bias) p.c.init(bias, pd.bias_desc());
    p.d.init(dst, pd.dst_desc());
    p.prim = dnnl::convolution_forward(pd);
    p.scratchpad_desc = pd.scratchpad_desc();
  } else if (op == Op::kBackwardData) {
    using bwd = dnnl::convolution_backward_data;
    const auto hint = forward_pd(d, false, dnnl::primitive_attr());
    const bwd::primitive_desc pd(bwd::desc(dnnl::algorithm::convolution_direct, d.any(d.src), d.any(d.weights),
                                           d.any(d.dst), d.strides, d.dilates, d.padding, d.padding),
                                 user_scratchpad(), cpu_engine(), hint);
    p.a.init(dst, pd.diff_dst_desc());
    p.b.init(wei, pd.weights_desc());
    p.d.init(src, pd.diff_src_desc());
    p.prim = bwd(pd);
    p.scratchpad_desc = pd.scratchpad_desc();
  } else {
    using bwd = dnnl::convolution_backward_weights;
    const auto hint = forward_pd(d, with_bias, dnnl::primitive_attr());
    const auto desc = with_bias ? bwd::desc(dnnl::algorithm::convolution_direct, d.any(d.src), d.any(d.weights),
                                            d.any(d.bias), d.any(d.dst), d.strides, d.dilates, d.padding, d.padding)
                                : bwd::desc(dnnl::algorithm::convolution_direct, d.any(d.src), d.any(d.weights),
                                            d.any(d.dst), d.strides, d.dilates, d.padding, d.padding);
    const bwd::primitive_desc pd(desc, user_scratchpad(), cpu_engine(), hint);
    p.a.init(src, pd.src_desc());
    p.b.init(dst, pd.diff_dst_desc());
    if (with_bias) p.c.init(bias, pd.diff_bias_desc());
    p.d.init(wei, pd.diff_weights_desc());
    p.prim = bwd(pd);
    p.scratchpad_desc = pd.scratchpad_desc();
  }
  p.scratchpad.resize(p.scratchpad_desc.get_size());
  return p;
}

using Key = std::tuple<int64_t, int64_t, int64_t, int64_t, int64_t, int64_t, int64_t, int64_t, int, bool>;

// The calling thread's plan for (shape, op, bias), created on first use with one OpenMP thread.
Plan& plan_for(const Conv2dShape& s, Op op, bool with_bias) {
  omp_set_num_threads(1);
  thread_local std::map<Key, std::unique_ptr<Plan>> plans;
  const Key key{s.n, s.c_in, s.h, s.w, s.c_out, s.kernel, s.stride, s.padding, static_cast<int>(op), with_bias};
  auto& slot = plans[key];
  if (!slot) slot = std::make_unique<Plan>(make_plan(s, op, with_bias));
  return *slot;
}

dnnl::stream& thread_stream() {
  thread_local dnnl::stream strm(cpu_engine());
  return strm;
}

float* mut(const float* p) { return const_cast<float*>(p); }  // oneDNN memories take void*; inputs are read only

}  // namespace

void onednn_conv2d_forward(const Conv2dShape& s, const float* x, const float* weight, const float* bias, float* y) {
  Plan& p = plan_for(s, Op::kForward, bias != nullptr);
  auto& strm = thread_stream();
  memory src = p.a.bind(mut(x), true, strm), wei = p.b.bind(mut(weight), true, strm);
  memory dst = p.d.bind(y, false, strm);
  memory pad(p.scratchpad_desc, cpu_engine(), p.scratchpad.data());
  std::unordered_map<int, memory> args{
      {DNNL_ARG_SRC, src}, {DNNL_ARG_WEIGHTS, wei}, {DNNL_ARG_DST, dst}, {DNNL_ARG_SCRATCHPAD, pad}};
  if (bias) args.emplace(DNNL_ARG_BIAS, p.c.bind(mut(bias), true, strm));
  p.prim.execute(strm, args);
  p.d.copy_out(dst, y, strm);
  strm.wait();
}

void onednn_conv2d_backward(const Conv2dShape& s, const float* x, const float* weight, const float* grad_y,
                            float* grad_x, float* grad_w, float* grad_b) {
  auto& strm = thread_stream();
  if (grad_x) {  // mkldnn_convolution_backward_input
    Plan& p = plan_for(s, Op::kBackwardData, false);
    memory gy = p.a.bind(mut(grad_y), true, strm), wei = p.b.bind(mut(weight), true, strm);
    memory gx = p.d.bind(grad_x, false, strm);
    memory pad(p.scratchpad_desc, cpu_engine(), p.scratchpad.data());
    p.prim.execute(
        strm, {{DNNL_ARG_DIFF_DST, gy}, {DNNL_ARG_WEIGHTS, wei}, {DNNL_ARG_DIFF_SRC, gx}, {DNNL_ARG_SCRATCHPAD, pad}});
    p.d.copy_out(gx, grad_x, strm);
  }
  if (grad_w) {  // mkldnn_convolution_backward_weights
    Plan& p = plan_for(s, Op::kBackwardWeights, grad_b != nullptr);
    memory src = p.a.bind(mut(x), true, strm), gy = p.b.bind(mut(grad_y), true, strm);
    memory gw = p.d.bind(grad_w, false, strm);
    memory pad(p.scratchpad_desc, cpu_engine(), p.scratchpad.data());
    std::unordered_map<int, memory> args{
        {DNNL_ARG_SRC, src}, {DNNL_ARG_DIFF_DST, gy}, {DNNL_ARG_DIFF_WEIGHTS, gw}, {DNNL_ARG_SCRATCHPAD, pad}};
    memory gb;
    if (grad_b) {
      gb = p.c.bind(grad_b, false, strm);
      args.emplace(DNNL_ARG_DIFF_BIAS, gb);
    }
    p.prim.execute(strm, args);
    p.d.copy_out(gw, grad_w, strm);
    if (grad_b) p.c.copy_out(gb, grad_b, strm);
  }
  strm.wait();
}

}  // namespace ddplab::nn::detail
