// The gradient half of ddp_check's prediction for an FSDP2 run (torch 2.x fully_shard, issue 42): FsdpReplay.
// What it models was measured on torch 2.11 and 2.15 over Gloo (../docs/trace_format.md, "fsdp";
// tests/fsdp_reduce_test.cc, tests/ddp_check_test.cc's FSDP2 cases):
//   - autograd accumulates each backward's gradient on FSDP's unsharded parameter (grad = g, then grad += g)
//     while set_requires_gradient_sync(False) holds;
//   - at a synchronised backward each group with gradients is reduce-scattered: the parameters that have an
//     unsharded gradient, in the group's order, in one padded flat buffer; their unsharded gradients are then None;
//   - each rank's shard is added to its sharded .grad (`grad._local_tensor += shard`), or becomes it when None.
#include <fmt/format.h>

#include "src/check/replay.h"
#include "src/collective/fsdp.h"

namespace ddplab::check {

FsdpReplay::FsdpReplay(const Run& run) : run_(run) {
  unsharded_.assign(static_cast<size_t>(run.world_size()),
                    std::vector<std::vector<float>>(run.first().params.size()));
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
        if (acc.empty()) {
          acc = g->data;
        } else {
          for (size_t e = 0; e < acc.size(); ++e) acc[e] += g->data[e];
        }
      }
    }
    if (!ref.backwards[k].sync) continue;
    for (const std::vector<size_t>& group : f.groups) {
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
      for (size_t i : with_grad) shapes.push_back(f.full[i].shape);
      std::vector<std::vector<const float*>> local(ws);
      for (size_t r = 0; r < ws; ++r)
        for (size_t i : with_grad) local[r].push_back(unsharded_[r][i].data());
      const auto shards = collective::fsdp_reduce_scatter(shapes, local);
      for (size_t r = 0; r < ws; ++r)
        for (size_t j = 0; j < with_grad.size(); ++j) {
          Parameter& p = (*params)[r][with_grad[j]];
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
