// The gradient half of ddp_check's prediction: GradReplay, DDP's synchronised backward over every rank's recorded
// local gradients (Reducer, buckets, the backend's all-reduce order, comm hooks).
#include "src/check/replay/replay.h"

#include <algorithm>
#include <cstdio>

#include <fmt/format.h>

#include "src/ddp/comm_hook.h"
#include "src/data/torch_rng.h"

namespace ddplab::check {
namespace {

using nlohmann::json;

// The hooks torch ships in torch.distributed.algorithms.ddp_comm_hooks, as the recorder names them.
bool torch_ships(const DdpOptions& d) {
  static const char* kKinds[] = {"allreduce", "fp16_compress", "bf16_compress", "powerSGD", "batched_powerSGD",
                                 "noop", "post_localSGD", "fp16_compress_wrapper", "bf16_compress_wrapper",
                                 "quantization_pertensor", "quantization_perchannel"};
  for (const char* k : kKinds)
    if (d.comm_hook == k) return true;
  return d.comm_hook_module.rfind("torch.distributed.", 0) == 0;
}

// The run's comm hook as ddplab's. null with *known true: no hook; null with *known false: one ddplab
// does not model (*why says which and why). post_localSGD is the allreduce hook until its switch (the
// caller swaps in the local part, local_sgd_hook()).
std::unique_ptr<ddp::CommHook> known_hook(const DdpOptions& d, bool* known, std::string* why) {
  *known = true;
  ddp::CommHookOptions o;
  std::string kind = d.comm_hook;
  // fp16/bf16_compress_wrapper(allreduce_hook) casts the bucket, divides and sums in 16 bits and casts back:
  // fp16/bf16_compress_hook's arithmetic.
  if ((kind == "fp16_compress_wrapper" || kind == "bf16_compress_wrapper") && d.comm_hook_inner == "allreduce")
    kind = kind == "fp16_compress_wrapper" ? "fp16_compress" : "bf16_compress";
  if (kind.empty()) return nullptr;
  if (kind == "allreduce" || kind == "post_localSGD") {
    o.name = "allreduce";
  } else if (kind == "fp16_compress") {
    o.name = "fp16-compress";
  } else if (kind == "bf16_compress") {
    o.name = "bf16-compress";
  } else if (kind == "noop") {
    o.name = "noop";
  } else if (kind == "powerSGD") {
    const json& s = d.comm_hook_state;
    o.name = "powersgd";
    o.powersgd_rank = s.value("matrix_approximation_rank", int64_t{1});
    o.powersgd_start_iter = s.value("start_powerSGD_iter", int64_t{1000});
    o.powersgd_min_compression_rate = static_cast<int64_t>(s.value("min_compression_rate", 2.0));
    o.powersgd_error_feedback = s.value("use_error_feedback", true);
    o.powersgd_warm_start = s.value("warm_start", true);
    o.powersgd_random_seed = s.value("random_seed", uint64_t{0});
    if (o.powersgd_rank > 2) {
      *known = false;
      *why = "PowerSGD with matrix_approximation_rank " + std::to_string(o.powersgd_rank) +
             " orthogonalises with LAPACK's QR, which ddplab does not model (ranks 1 and 2 it does)";
      return nullptr;
    }
  } else {
    *known = false;
    if (kind == "batched_powerSGD")
      *why = "batched_powerSGD_hook (one square matrix per bucket) is not modelled; powerSGD_hook is";
    else if (kind.rfind("quantization", 0) == 0)
      *why = "torch's " + kind + "_hook quantizes to uint8 with scales all-gathered, not modelled";
    else if (kind.find("wrapper") != std::string::npos)
      *why = "torch's " + kind + " around " + (d.comm_hook_inner.empty() ? std::string("a hook") : d.comm_hook_inner) +
             " is modelled only around allreduce_hook";
    else
      *why = "comm hook '" + d.comm_hook + "'";
    return nullptr;
  }
  return ddp::make_comm_hook(o);
}

// The replay's parameters of a manifest: names and shapes (the value only sizes them).
std::vector<Parameter> parameters_of(const Manifest& m) {
  std::vector<Parameter> ps;
  for (const TensorInfo& t : m.params) {
    Parameter p;
    p.name = t.name;
    p.shape = t.shape;
    p.value = Matrix::Zero(1, t.numel);
    ps.push_back(std::move(p));
  }
  return ps;
}

// NCCL's order is ddplab's nccl_ring only when the run pinned it to one ring channel and the Simple protocol.
bool nccl_pinned(const std::map<std::string, std::string>& env) {
  const auto is = [&](const char* k, const char* v) {
    auto it = env.find(k);
    return it != env.end() && it->second == v;
  };
  return is("NCCL_ALGO", "Ring") && is("NCCL_PROTO", "Simple") && is("NCCL_MAX_NCHANNELS", "1");
}

}  // namespace

GradReplay::GradReplay(const Run& run) : run_(run) {
  const Manifest& m = run.first();
  const int ws = run.world_size();
  memory_order_.resize(m.params.size());  // filled when a parameter's gradient is first met (its size then real)
  if (m.fsdp.present) {  // each rank's parameters are its shards
    for (const Manifest& rm : run.ranks) params_.push_back(parameters_of(rm));
    fsdp_ = std::make_unique<FsdpReplay>(run);
    if (!m.fsdp.not_modelled.empty()) {
      grads_checked_ = exact_ = false;
      grads_why_ = fmt::format("FSDP2 with {}, which ddp_check does not model", fmt::join(m.fsdp.not_modelled, ", "));
      order_ = grads_why_ + ": the sharded gradients are not predicted";
    } else {
      order_ = ws == 1 ? "one rank: nothing to add"
                       : "FSDP2's reduce-scatter over Gloo: Gloo's ring all-reduce over each group's padded flat buffer "
                         "(every rank's shard slot, parameter by parameter), then / world_size";
    }
    return;
  }
  if (m.backend == "gloo") {
    order_ = "Gloo's ring (each bucket chunked as Gloo chunks it), after grad * float(1/world_size)";
  } else if (m.backend == "nccl" && nccl_pinned(m.env)) {
    algorithm_ = collective::Algorithm::nccl_ring;
    order_ = "pinned: NCCL's ring, by NCCL_ALGO=Ring NCCL_PROTO=Simple NCCL_MAX_NCHANNELS=1";
  } else {
    exact_ = false;
    order_ = m.backend == "nccl"
                 ? "unknown: NCCL picks its algorithm, protocol and channels by size and topology, and this trace "
                   "has no measured order (DDPTrace(..., measure_order=True) measures it at close(); or pin NCCL "
                   "with NCCL_ALGO=Ring NCCL_PROTO=Simple NCCL_MAX_NCHANNELS=1) (compared allclose)"
                 : "unknown for backend '" + m.backend + "' (compared allclose)";
  }
  if (ws == 1) order_ = "one rank: nothing to add";
  // Measured on the run's own communicator: it decides the built-in all-reduce's order (a comm hook's
  // collectives are of other sizes and types: not measured).
  if (ws > 2 && m.allreduce_order.present && m.ddp.comm_hook.empty()) {
    std::string why;
    const bool all = use_measured_orders(m, &why);
    const std::string known = order_;
    if (all) {
      exact_ = true;
      order_ = fmt::format("measured on the run's own communicator ({} all-reduces at close(): each bucket size's "
                           "chain of ranks, confirmed by a seeded all-reduce){}",
                           m.allreduce_order.all_reduces, m.backend == "gloo" ? "" : "; " + m.backend + " not pinned");
      if (m.backend == "nccl" && nccl_pinned(m.env)) order_ += "; NCCL was pinned too";
    } else if (exact_) {
      order_ = known + " (the measured order: " + why + ")";
    } else {
      order_ = "unknown: " + why + " (compared allclose)";
    }
    builtin_.measured = [this](size_t n) -> const collective::MeasuredOrder* {
      auto it = measured_.find(n);
      return it == measured_.end() ? nullptr : it->second;
    };
  }
  params_.resize(static_cast<size_t>(ws));
  bool hook_known = true;
  std::string hook_why;
  for (int r = 0; r < ws; ++r) {
    auto& ps = params_[static_cast<size_t>(r)];
    ps = parameters_of(m);
    std::vector<Parameter*> ptrs;
    for (Parameter& p : ps) ptrs.push_back(&p);
    auto red = std::make_unique<ddp::Reducer>(ptrs, ws, m.ddp.bucket_cap_mb, ddp::Average::predivide);
    red->set_gradient_as_bucket_view(m.ddp.gradient_as_bucket_view);
    red->set_first_bucket_bytes(static_cast<size_t>(m.ddp.first_bucket_bytes));
    if (auto hook = known_hook(m.ddp, &hook_known, &hook_why)) red->register_comm_hook(std::move(hook));
    // find_unused_parameters=True (not static_graph): DDP never rebuilds; its one layout is
    // _compute_bucket_assignment_by_size over the parameters in order with limits [1 MiB, cap], reversed.
    if (m.ddp.find_unused_parameters && !m.ddp.static_graph) {
      std::vector<size_t> order, bytes;
      for (size_t i = 0; i < ps.size(); ++i) {
        order.push_back(i);
        bytes.push_back(static_cast<size_t>(ps[i].numel()) * sizeof(float));
      }
      auto layout = ddp::assign_buckets(order, bytes,
                                        {ddp::Reducer::kFirstBucketBytes,
                                         static_cast<size_t>(m.ddp.bucket_cap_mb * 1024 * 1024)});
      std::reverse(layout.begin(), layout.end());
      red->set_layout(layout);
    }
    reducers_.push_back(std::move(red));
  }
  if (reducers_[0]->comm_hook()) hooked_ = std::make_unique<ddp::HookedAllreduce>(ws, algorithm_);
  check_layout(m.torch_buckets_initial, "at DDP(...) (iteration 0)", -1);
  if (!hook_known && torch_ships(m.ddp)) {
    // A hook torch ships is right by construction: its gradients are not compared (no false alarm); the
    // replicas, the optimizer step and the data are still checked.
    grads_checked_ = false;
    grads_why_ = hook_why;
    order_ = "comm hook " + m.ddp.comm_hook + ": " + hook_why + ", so DDP's gradients are not predicted";
  } else if (!hook_known) {
    exact_ = false;
    order_ = "comm hook '" + m.ddp.comm_hook +
             "' is the script's own (ddplab models torch's allreduce, fp16/bf16 compress and their wrappers around "
             "allreduce, noop, post-local SGD, PowerSGD up to rank 2): predicted as DDP's built-in average, "
             "compared allclose";
  } else if (m.ddp.comm_hook == "post_localSGD") {
    // Until state.iter reaches start_localSGD_iter the hook is allreduce_hook; from then on it all-reduces
    // within its subgroup: nothing to do in a subgroup of one rank, allreduce_hook in one of every rank.
    const json& st = m.ddp.comm_hook_state;
    local_sgd_switch_ = std::max<int64_t>(0, st.value("start_localSGD_iter", int64_t{0}) - st.value("iter", int64_t{0}));
    const bool reduce = st.value("post_local_gradient_allreduce", true);
    const int64_t sub = st.contains("subgroup_size") && st.at("subgroup_size").is_number_integer()
                            ? st.at("subgroup_size").get<int64_t>() : -1;
    local_hook_ = !reduce || sub == 1 ? "noop" : sub == ws ? "allreduce" : "";
    if (local_hook_.empty()) {
      grads_checked_ = false;
      grads_why_ = "post_localSGD_hook all-reduces within subgroups of " + std::to_string(sub) +
                   " ranks after its switch, not modelled";
    }
    order_ = fmt::format("post-local SGD: allreduce_hook over {} for {} more iterations, then {}", order_,
                         local_sgd_switch_, local_hook_ == "noop" ? "each rank's own gradient (local SGD)"
                                                                  : "allreduce_hook within the subgroup");
  } else if (m.ddp.comm_hook == "noop") {
    order_ = "noop_hook: no all-reduce at all, each rank keeps its own gradient";
  } else if (hooked_ && m.ddp.comm_hook == "powerSGD" && m.every != 1) {
    exact_ = false;
    order_ += "; PowerSGD keeps state across steps and every=" + std::to_string(m.every) +
              " skips steps: compared allclose";
  } else if (hooked_) {
    order_ = "comm hook " + m.ddp.comm_hook + " (ddplab's port of torch's) over " + order_;
  }
}

bool GradReplay::use_measured_orders(const Manifest& m, std::string* why) {
  const AllreduceOrder& ao = m.allreduce_order;
  if (!ao.measured) {
    *why = "not measured: " + ao.why;
    return false;
  }
  const size_t ws = static_cast<size_t>(run_.world_size());
  std::vector<std::string> unconfirmed;
  for (const MeasuredSize& s : ao.sizes) {
    if (s.order.runs.empty()) {
      unconfirmed.push_back(fmt::format("n = {}: {}", s.order.n, s.why));
      continue;
    }
    // The seeded all-reduce: rank r held torch.randn(n) from manual_seed(seed + r).
    std::vector<std::vector<float>> x;
    std::vector<float*> bufs;
    for (size_t r = 0; r < ws; ++r) x.push_back(Generator(static_cast<uint64_t>(ao.seed) + r).randn(static_cast<int64_t>(s.order.n)));
    for (auto& v : x) bufs.push_back(v.data());
    collective::chain_allreduce(s.order, bufs, pool_);
    if (fold64_of(x[0].data(), x[0].size()) == s.digest) {
      measured_[s.order.n] = &s.order;
    } else {
      unconfirmed.push_back(fmt::format("n = {}: the probes' chain does not reproduce the seeded all-reduce", s.order.n));
    }
  }
  // Every bucket size torch all-reduced (its layouts, as the recorder measured them) must have its order.
  for (const auto* layout : {&m.torch_buckets_initial, &m.torch_buckets}) {
    for (const auto& bucket : *layout) {
      size_t n = 0;
      for (size_t i : bucket) n += static_cast<size_t>(m.params[i].numel);
      if (!measured_.count(n) && std::none_of(ao.sizes.begin(), ao.sizes.end(), [&](const MeasuredSize& s) { return s.order.n == n; }))
        unconfirmed.push_back(fmt::format("n = {}: not measured", n));
    }
  }
  if (measured_.empty() && unconfirmed.empty()) unconfirmed.push_back("no bucket size measured");
  std::sort(unconfirmed.begin(), unconfirmed.end());
  unconfirmed.erase(std::unique(unconfirmed.begin(), unconfirmed.end()), unconfirmed.end());
  *why = fmt::format("{}", fmt::join(unconfirmed, "; "));
  return unconfirmed.empty();
}

void GradReplay::sync(int64_t step) {
  std::vector<ddp::Reducer*> reds;
  for (auto& r : reducers_) reds.push_back(r.get());
  if (local_sgd_switch_ >= 0 && syncs_ == local_sgd_switch_ && local_hook_ == "noop") {
    ddp::CommHookOptions o;
    o.name = "noop";
    for (auto& r : reducers_) r->register_comm_hook(ddp::make_comm_hook(o));
  }
  ++syncs_;
  if (hooked_) {
    hooked_->run(reds);
  } else {
    builtin_.run(reds, algorithm_, nullptr, pool_);
  }
  // DDP rebuilds its buckets at the forward after the first synchronised backward; with static_graph one
  // iteration later, since its first backward all-reduces late, after the graph ran (_delay_all_reduce), and
  // records the ready order for the rebuild only in the second (measured on torch 1.13:
  // tests/ddp_check/scripts/static_graph_unused.py is bit for bit only so).
  if (first_sync_done_ || syncs_ < (run_.first().ddp.static_graph ? 2 : 1)) return;
  first_sync_done_ = true;
  const Manifest& m = run_.first();
  const bool rebuilds = !m.ddp.find_unused_parameters || m.ddp.static_graph;
  if (rebuilds) {
    // rebuilt_params_: the order the first synchronised backward marked gradients ready.
    for (size_t r = 0; r < reducers_.size(); ++r) {
      std::vector<Parameter*> ready;
      std::vector<bool> seen(params_[r].size(), false);
      for (size_t i : m.first_ready_order) ready.push_back(&params_[r][i]), seen[i] = true;
      // static_graph marks the parameters no backward reached ready after the others, in their order
      // (measured on torch 1.13: an unused head ends the last bucket).
      for (size_t i = 0; i < seen.size() && m.ddp.static_graph; ++i)
        if (!seen[i]) ready.push_back(&params_[r][i]);
      reducers_[r]->finish_sync(ready);
    }
  }
  check_layout(m.torch_buckets, "rebuilt from the first backward's ready order", step);
}

void GradReplay::check_layout(const std::vector<std::vector<size_t>>& torch, const char* when, int64_t step) {
  if (torch.empty()) return;
  std::vector<std::vector<size_t>> mine;
  for (size_t b = 0; b < reducers_[0]->num_buckets(); ++b) mine.push_back(reducers_[0]->bucket(b).params);
  if (mine == torch) return;
  const std::string predicted = reducers_[0]->describe();
  for (auto& r : reducers_) r->set_layout(torch, step >= 0);  // iteration 0's layout is still rebuilt
  notes_.push_back(fmt::format("{}torch's bucket layout {} differs from the predicted one ({}); the replay uses "
                               "torch's: {}",
                               step >= 0 ? fmt::format("after step {}: ", step) : "", when, predicted,
                               reducers_[0]->describe()));
}

bool GradReplay::predict(const std::vector<const StepRecord*>& recs, std::string* why) {
  if (fsdp_) return fsdp_->predict(recs, &params_, why);
  const Manifest& m = run_.first();
  const size_t np = m.params.size(), ws = recs.size();
  // The ranks that ran this iteration; the others have joined (Join): they shadow every all-reduce with zeros.
  const StepRecord* ref = nullptr;
  size_t active = 0;
  for (const StepRecord* rec : recs)
    if (rec) {
      ref = ref ? ref : rec;
      ++active;
    }
  const size_t nb = ref->backwards.size();
  for (const StepRecord* rec : recs) {
    if (!rec) continue;
    if (rec->backwards.size() != nb) {
      *why = fmt::format("rank {} ran {} backwards before step {}, rank {} ran {}: DDP's all-reduces do not pair",
                         rec->rank, rec->backwards.size(), rec->step, ref->rank, nb);
      return false;
    }
    for (size_t k = 0; k < nb; ++k)
      if (rec->backwards[k].sync != ref->backwards[k].sync) {
        *why = fmt::format("backward {} of step {} synchronised on rank {} but not on rank {}", k, rec->step,
                           ref->backwards[k].sync ? ref->rank : rec->rank, ref->backwards[k].sync ? rec->rank : ref->rank);
        return false;
      }
  }
  if (active < ws && !ref->divide_by_initial_world_size && reducers_[0]->comm_hook()) {
    *why = "Join(divide_by_initial_world_size=False) with a comm hook is not modelled";
    return false;
  }
  const int64_t div = ref->divide_by_initial_world_size ? static_cast<int64_t>(ws) : static_cast<int64_t>(active);
  for (size_t r = 0; r < ws; ++r) {
    reducers_[r]->set_join_state(recs[r] == nullptr, div);
    if (!recs[r]) continue;
    // .grad as the step found it: the recorded prior, or None.
    bool any_prior = false;
    for (size_t i = 0; i < np; ++i) {
      Parameter& p = params_[r][i];
      const safetensors::Tensor* prior = recs[r]->find("prior", p.name);
      p.has_grad = prior != nullptr;
      if (prior) {
        p.grad = in_memory_order(i, prior->data);
        any_prior = true;
      }
    }
    if (!any_prior) reducers_[r]->grads_set_to_none();
  }
  const bool unused_zeros = m.ddp.find_unused_parameters || m.ddp.static_graph;
  std::vector<std::vector<bool>> used(ws, std::vector<bool>(np, false));
  // The recorded .grad after DDP is taken right after the last synchronised backward: backwards after it (a
  // second backward of one graph, which DDP does not reduce) change .grad, not what DDP left.
  size_t last_sync = nb;
  for (size_t k = 0; k < nb; ++k)
    if (ref->backwards[k].sync) last_sync = k;
  std::vector<std::vector<std::pair<bool, Matrix>>> left_by_ddp;
  for (size_t k = 0; k < nb; ++k) {
    if (k == last_sync + 1) {
      left_by_ddp.assign(ws, {});
      for (size_t r = 0; r < ws; ++r)
        for (size_t i = 0; i < np && recs[r]; ++i)
          left_by_ddp[r].emplace_back(params_[r][i].has_grad, params_[r][i].grad);
    }
    const std::string kind = "local/" + std::to_string(k);
    for (size_t r = 0; r < ws; ++r)  // zero_grad() between the previous backward and this one
      for (const StepRecord::ZeroGrad& z : recs[r] ? recs[r]->zero_grads : std::vector<StepRecord::ZeroGrad>{}) {
        if (z.before_backward != k) continue;
        for (size_t i = 0; i < np; ++i) {
          Parameter& p = params_[r][i];
          if (z.set_to_none || z.none.count(i)) {
            p.has_grad = false;
          } else if (p.has_grad) {
            p.grad.setZero();
          }
        }
        if (z.set_to_none) reducers_[r]->grads_set_to_none();
      }
    for (size_t r = 0; r < ws; ++r)
      for (size_t i = 0; i < np && recs[r]; ++i) {
        Parameter& p = params_[r][i];
        if (const safetensors::Tensor* g = recs[r]->find(kind, p.name)) {
          // AccumulateGrad: grad += new, or grad = new (one copy, straight from the record)
          if (!run_.first().params[i].strides.empty()) {
            const Matrix local = in_memory_order(i, g->data);
            p.grad = p.has_grad ? Matrix(p.grad + local) : local;
            p.has_grad = true;
            used[r][i] = true;
            continue;
          }
          const Eigen::Map<const Matrix> local(g->data.data(), 1, static_cast<Eigen::Index>(g->data.size()));
          if (p.has_grad) {
            p.grad += local;
          } else {
            p.grad = local;
            p.has_grad = true;
          }
          used[r][i] = true;
        }
      }
    if (!ref->backwards[k].sync) continue;
    if (unused_zeros) {
      std::vector<bool> global(np, true);
      for (size_t r = 0; r < ws; ++r)
        for (size_t i = 0; i < np; ++i) global[i] = global[i] && !used[r][i];
      for (size_t r = 0; r < ws; ++r) {
        std::vector<bool> local(np);
        for (size_t i = 0; i < np; ++i) local[i] = !used[r][i];
        reducers_[r]->set_unused(local, global);
      }
    } else {
      for (size_t r = 0; r < ws; ++r)
        for (size_t i = 0; i < np && recs[r]; ++i)
          if (!params_[r][i].has_grad) {
            *why = fmt::format("parameter '{}' got no gradient on rank {} in step {}, and find_unused_parameters "
                               "is False (torch would have raised)",
                               params_[r][i].name, r, recs[r]->step);
            return false;
          }
    }
    sync(ref->step);
    for (auto& u : used) std::fill(u.begin(), u.end(), false);  // local_used_map resets per sync
  }
  for (size_t r = 0; r < left_by_ddp.size(); ++r)
    for (size_t i = 0; i < left_by_ddp[r].size(); ++i) {
      params_[r][i].has_grad = left_by_ddp[r][i].first;
      params_[r][i].grad = std::move(left_by_ddp[r][i].second);
    }
  // Gradients kept in memory order for the buckets go back to row-major, as the recorder wrote .grad.
  for (size_t r = 0; r < ws; ++r)
    for (size_t i = 0; i < np && recs[r]; ++i) {
      Parameter& p = params_[r][i];
      if (run_.first().params[i].strides.empty() || !p.has_grad) continue;
      Matrix row_major(p.grad.rows(), p.grad.cols());
      for (size_t k = 0; k < memory_order_[i].size(); ++k)
        row_major.data()[memory_order_[i][k]] = p.grad.data()[k];
      p.grad = std::move(row_major);
    }
  return true;
}

// A recorded tensor (row-major) as parameter i's bucket holds it: in its memory order where it is not row-major.
Matrix GradReplay::in_memory_order(size_t i, const std::vector<float>& row_major) const {
  const auto n = static_cast<Eigen::Index>(row_major.size());
  const TensorInfo& t = run_.first().params[i];
  if (t.strides.empty()) return Eigen::Map<const Matrix>(row_major.data(), 1, n);
  if (memory_order_[i].empty()) memory_order_[i] = t.memory_order();
  if (memory_order_[i].size() != row_major.size())
    throw TraceError(t.name + ": a recorded tensor of " + std::to_string(row_major.size()) + " values, its strides lay out " +
                     std::to_string(memory_order_[i].size()));
  Matrix out(1, n);
  for (size_t k = 0; k < memory_order_[i].size(); ++k) out.data()[k] = row_major[static_cast<size_t>(memory_order_[i][k])];
  return out;
}


}  // namespace ddplab::check
