// The gradient half of ddp_check's prediction for an FSDP2 run (torch 2.x fully_shard, issue 42): FsdpReplay.
// What it models was measured on torch 2.15 over Gloo (docs/trace_format.md, "fsdp"; tests/fsdp_reduce_test.cc,
// tests/ddp_check_test.cc's FSDP2 cases):
//   - autograd accumulates each backward's gradient on FSDP's unsharded parameter (grad = g, then grad += g)
//     while set_requires_gradient_sync(False) holds;
//   - at a synchronised backward each group with gradients is reduce-scattered: the parameters that have an
//     unsharded gradient, in the group's order, in one padded flat buffer; their unsharded gradients are then None;
//   - a 16-bit reduce_dtype: the unsharded parameter's grad_dtype is that dtype (torch 2.15 sets it), so each
//     backward's gradient comes in it and an accumulation over backwards rounds each sum to it; the flat buffer,
//     the ring's adds and the divisions are in it too (fsdp.h). With param_dtype alone the reduce is in float32
//     over 16-bit-valued gradients (the recorder says which dtype, manifest "reduce_dtype"). Measured on torch
//     2.15 at 2-4 ranks, 1-3 micro-batches, bf16 and fp16, with and without param_dtype: bit for bit;
//   - a parameter sharded on dim d > 0 (shard_placement_fn, even sharding only) enters the flat buffer as its chunks
//     along d stacked on dim 0;
//   - each rank's shard is added to its sharded .grad (`grad._local_tensor += shard`), or becomes it when None.
#include <fmt/format.h>

#include "src/check/replay/replay.h"
#include "src/collective/fsdp.h"

namespace ddplab::check {

namespace {

// torch.cat(torch.chunk(g, ws, dim=d), dim=0) of a row-major g (FSDP's copy-in for a Shard(d) parameter, d > 0):
// then rank r's dim-0 slot is its Shard(d) chunk, row-major.
std::vector<float> stack_chunks(const std::vector<float>& g, const std::vector<int64_t>& shape, int64_t d, size_t ws) {
  int64_t outer = 1, inner = 1;
  for (int64_t k = 0; k < d; ++k) outer *= shape[static_cast<size_t>(k)];
  for (size_t k = static_cast<size_t>(d) + 1; k < shape.size(); ++k) inner *= shape[k];
  const int64_t part = shape[static_cast<size_t>(d)] / static_cast<int64_t>(ws);
  std::vector<float> out;
  out.reserve(g.size());
  for (int64_t c = 0; c < static_cast<int64_t>(ws); ++c)
    for (int64_t o = 0; o < outer; ++o) {
      const float* row = g.data() + (o * shape[static_cast<size_t>(d)] + c * part) * inner;
      out.insert(out.end(), row, row + part * inner);
    }
  return out;
}

}  // namespace

FsdpReplay::FsdpReplay(const Run& run) : run_(run) {
  const Fsdp& f = run.first().fsdp;
  unsharded_.assign(static_cast<size_t>(run.world_size()), std::vector<std::vector<float>>(f.full.size()));
  group_of_.assign(f.full.size(), 0);
  for (size_t g = 0; g < f.groups.size(); ++g)
    for (size_t i : f.groups[g]) group_of_[i] = g;
}

std::string FsdpReplay::groups() const {
  const Fsdp& f = run_.first().fsdp;
  std::string out = fmt::format("FSDP2, {} parameter groups (one reduce-scatter each per synchronised backward): ",
                                f.groups.size());
  for (size_t g = 0; g < f.groups.size(); ++g) {
    int64_t n = 0;
    for (size_t i : f.groups[g]) n += f.full[i].numel;
    out += fmt::format("{}{} [{} params, {} floats]", g ? " | " : "",
                       f.group_modules[g].empty() ? std::string("(root)") : f.group_modules[g], f.groups[g].size(), n);
  }
  return out;
}

bool FsdpReplay::predict(const std::vector<const StepRecord*>& recs, std::vector<std::vector<Parameter>>* params,
                         std::string* why) {
  const Fsdp& f = run_.first().fsdp;
  const size_t ws = recs.size(), np = f.full.size();
  for (size_t r = 0; r < ws; ++r)
    if (!recs[r]) {
      *why = fmt::format("rank {} has no record of this step (Join, or its trace ended): FSDP's reduce-scatters do not "
                         "pair", r);
      return false;
    }
  const StepRecord& ref = *recs[0];
  for (const StepRecord* rec : recs) {
    if (rec->backwards.size() != ref.backwards.size()) {
      *why = fmt::format("rank {} ran {} backwards before step {}, rank 0 ran {}: FSDP's reduce-scatters do not pair",
                         rec->rank, rec->backwards.size(), rec->step, ref.backwards.size());
      return false;
    }
    for (size_t k = 0; k < ref.backwards.size(); ++k)
      if (rec->backwards[k].sync != ref.backwards[k].sync) {
        *why = fmt::format("backward {} of step {} reduce-scattered on rank {} but not on rank {}", k, rec->step,
                           ref.backwards[k].sync ? 0 : rec->rank, ref.backwards[k].sync ? rec->rank : 0);
        return false;
      }
  }
  bool carried = false;
  for (const auto& rank : unsharded_)
    for (const auto& g : rank) carried = carried || !g.empty();
  if (carried && carried_from_ + 1 != ref.step) {
    *why = fmt::format("step {} ended with gradients not yet reduce-scattered (set_requires_gradient_sync(False)), "
                       "and step {} is not recorded", carried_from_, carried_from_ + 1);
    for (auto& rank : unsharded_)
      for (auto& g : rank) g.clear();
    carried_from_ = -1;
    return false;
  }
  // The sharded .grad as the step found it: the recorded prior, or None.
  for (size_t r = 0; r < ws; ++r)
    for (Parameter& p : (*params)[r]) {
      const safetensors::Tensor* prior = recs[r]->find("prior", p.name);
      p.has_grad = prior != nullptr;
      if (prior) p.grad = Eigen::Map<const Matrix>(prior->data.data(), 1, static_cast<Eigen::Index>(prior->data.size()));
    }
  for (size_t k = 0; k < ref.backwards.size(); ++k) {
    const std::string kind = "local/" + std::to_string(k);
    for (size_t r = 0; r < ws; ++r) {
      for (const StepRecord::ZeroGrad& z : recs[r]->zero_grads) {  // zero_grad() on the sharded parameters
        if (z.before_backward != k) continue;
        for (size_t i = 0; i < np; ++i) {
          Parameter& p = (*params)[r][i];
          if (z.set_to_none || z.none.count(i)) {
            p.has_grad = false;
          } else if (p.has_grad) {
            p.grad.setZero();
          }
        }
      }
      for (size_t i = 0; i < np; ++i) {  // AccumulateGrad on the unsharded parameter
        const safetensors::Tensor* g = recs[r]->find(kind, f.full[i].name);
        if (!g) continue;
        std::vector<float>& acc = unsharded_[r][i];
        const collective::ReduceDtype dt = f.reduce_dtypes[group_of_[i]];
        if (acc.empty()) {
          acc = g->data;
        } else {  // each sum rounded to the reduce dtype (see the header comment)
          for (size_t e = 0; e < acc.size(); ++e) acc[e] = collective::fsdp_round(dt, acc[e] + g->data[e]);
        }
      }
    }
    if (!ref.backwards[k].sync) continue;
    for (size_t gi = 0; gi < f.groups.size(); ++gi) {
      const std::vector<size_t>& group = f.groups[gi];
      std::vector<size_t> with_grad;
      for (size_t i : group)
        if (!unsharded_[0][i].empty()) with_grad.push_back(i);
      for (size_t r = 1; r < ws; ++r)
        for (size_t i : group)
          if (unsharded_[r][i].empty() != unsharded_[0][i].empty()) {
            *why = fmt::format("step {}: '{}' has a gradient to reduce-scatter on rank {} but not on rank {}: the "
                               "ranks' flat buffers differ", ref.step, f.full[i].name,
                               unsharded_[0][i].empty() ? r : 0, unsharded_[0][i].empty() ? 0 : r);
            return false;
          }
      if (with_grad.empty()) continue;
      std::vector<std::vector<int64_t>> shapes;
      // Shard(d != 0): the chunks along d stacked on dim 0. local[r] points into moved[r]'s vectors, whose buffers
      // stay put when moved[r] itself grows.
      std::vector<std::vector<std::vector<float>>> moved(ws);
      std::vector<std::vector<const float*>> local(ws);
      for (size_t i : with_grad) {
        const int64_t d = f.shard_dim[i];
        std::vector<int64_t> shape = f.full[i].shape;
        if (d != 0 && shape[static_cast<size_t>(d)] % static_cast<int64_t>(ws) != 0) {
          *why = fmt::format("'{}' is sharded on dim {} of size {}, which world_size {} does not divide (torch "
                             "requires even sharding there)", f.full[i].name, d, shape[static_cast<size_t>(d)], ws);
          return false;
        }
        for (size_t r = 0; r < ws; ++r)
          if (d == 0) {
            local[r].push_back(unsharded_[r][i].data());
          } else {
            moved[r].push_back(stack_chunks(unsharded_[r][i], shape, d, ws));
            local[r].push_back(moved[r].back().data());
          }
        if (d != 0) shape[0] *= static_cast<int64_t>(ws), shape[static_cast<size_t>(d)] /= static_cast<int64_t>(ws);
        shapes.push_back(shape);
      }
      const auto shards = collective::fsdp_reduce_scatter(shapes, local, 0.0f, f.reduce_dtypes[gi]);
      for (size_t r = 0; r < ws; ++r)
        for (size_t j = 0; j < with_grad.size(); ++j) {
          Parameter& p = (*params)[r][with_grad[j]];
          if (static_cast<int64_t>(shards[r][j].size()) != p.numel()) {  // the manifests said other shards
            *why = fmt::format("rank {}'s shard of '{}' holds {} values, its manifest says {}", r, p.name,
                               shards[r][j].size(), p.numel());
            return false;
          }
          const Eigen::Map<const Matrix> shard(shards[r][j].data(), 1, static_cast<Eigen::Index>(shards[r][j].size()));
          if (p.has_grad) {
            p.grad += shard;
          } else {
            p.grad = shard;
            p.has_grad = true;
          }
          unsharded_[r][with_grad[j]].clear();
        }
    }
  }
  carried = false;
  for (const auto& rank : unsharded_)
    for (const auto& g : rank) carried = carried || !g.empty();
  carried_from_ = carried ? ref.step : -1;
  return true;
}

}  // namespace ddplab::check
