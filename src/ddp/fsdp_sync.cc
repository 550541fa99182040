#include "src/ddp/fsdp_sync.h"

#include <algorithm>
#include <map>

#include "src/collective/fsdp.h"

namespace ddplab::ddp {

std::vector<std::vector<size_t>> fsdp_groups(const std::vector<Parameter*>& params) {
  std::vector<std::vector<size_t>> groups;
  std::map<std::string, size_t> at;
  for (size_t i = 0; i < params.size(); ++i) {
    const std::string& name = params[i]->name;
    const std::string module = name.substr(0, name.rfind('.') == std::string::npos ? 0 : name.rfind('.'));
    auto [it, fresh] = at.emplace(module, groups.size());
    if (fresh) groups.emplace_back();
    groups[it->second].push_back(i);
  }
  return groups;
}

std::vector<HookReport> fsdp_allreduce(const std::vector<Reducer*>& reducers, size_t /*num_buckets*/) {
  const size_t ws = reducers.size();
  const auto& params0 = reducers[0]->params();
  for (const std::vector<size_t>& group : fsdp_groups(params0)) {
    std::vector<std::vector<int64_t>> shapes;
    for (size_t i : group) shapes.push_back(params0[i]->shape);  // torch's: a bias [out] shards by rows too
    std::vector<std::vector<const float*>> local(ws);
    for (size_t r = 0; r < ws; ++r)
      for (size_t i : group) local[r].push_back(reducers[r]->params()[i]->grad.data());
    const auto shards = collective::fsdp_reduce_scatter(shapes, local);
    // Every rank's .grad: the whole averaged gradient, the ranks' shards (rows) in rank order.
    for (size_t k = 0; k < group.size(); ++k) {
      std::vector<float> whole;
      for (size_t r = 0; r < ws; ++r) whole.insert(whole.end(), shards[r][k].begin(), shards[r][k].end());
      for (size_t r = 0; r < ws; ++r) {
        Parameter* p = reducers[r]->params()[group[k]];
        std::copy(whole.begin(), whole.end(), p->grad.data());
      }
    }
  }
  return {};
}

}  // namespace ddplab::ddp
