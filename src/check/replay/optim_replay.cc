// The optimizer half of ddp_check's prediction: torch.optim's step for one rank, from what the rank recorded.
#include "src/check/replay/replay.h"

#include <algorithm>
#include <cstdio>

#include <fmt/format.h>

#include "src/train/optim.h"

namespace ddplab::check {
namespace {

Matrix as_matrix(const std::vector<float>& v) {
  Matrix m(1, static_cast<Eigen::Index>(v.size()));
  std::copy(v.begin(), v.end(), m.data());
  return m;
}


// torch >= 2.1 steps Adam's exp_avg with lerp_ (pytorch/pytorch#104796, July 2023); 1.x and 2.0 with mul_ and add_.
bool lerp_adam(const std::string& version) {
  int major = 0, minor = 0;
  if (std::sscanf(version.c_str(), "%d.%d", &major, &minor) != 2) return false;
  return major > 2 || (major == 2 && minor >= 1);
}


}  // namespace

bool predict_step_fields(const Manifest& m, const StepRecord& rec, std::vector<Matrix>* after, std::string* why,
                         safetensors::TensorMap* state_after);

// A hyperparameter of an unexpected type (the optimizer's own) makes the step not modelled.
bool predict_step(const Manifest& m, const StepRecord& rec, std::vector<Matrix>* after, std::string* why,
                  safetensors::TensorMap* state_after) {
  try {
    return predict_step_fields(m, rec, after, why, state_after);
  } catch (const nlohmann::json::exception& e) {
    *why = m.optimizer_class + "'s param group holds a value ddp_check cannot read (" + e.what() + ")";
    return false;
  }
}

bool predict_step_fields(const Manifest& m, const StepRecord& rec, std::vector<Matrix>* after, std::string* why,
                         safetensors::TensorMap* state_after) {
  const std::string& cls = m.optimizer_class;
  const auto keep = [&](const Parameter* p, const char* key, const Matrix& v) {
    if (state_after) (*state_after)["state/" + p->name + "/" + key] = {p->shape, std::vector<float>(v.data(), v.data() + v.size())};
  };
  if (state_after) state_after->clear();
  if (cls != "SGD" && cls != "Adam" && cls != "AdamW") {
    *why = "optimizer " + cls + " is not modelled (SGD, Adam, AdamW are)";
    return false;
  }
  std::vector<Parameter> ps(m.params.size());
  for (size_t i = 0; i < ps.size(); ++i) {
    ps[i].name = m.params[i].name;
    ps[i].shape = m.params[i].shape;
    ps[i].value = as_matrix(rec.find("param_before", ps[i].name)->data);
    const safetensors::Tensor* g = rec.find("grad_step", ps[i].name);
    ps[i].has_grad = g != nullptr;
    if (g) ps[i].grad = as_matrix(g->data);
  }
  if (rec.num_groups >= 0 && static_cast<size_t>(rec.num_groups) != m.param_groups.size()) {
    *why = fmt::format("the optimizer has {} param groups at this step, {} when DDPTrace was made (add_param_group): "
                       "not modelled",
                       rec.num_groups, m.param_groups.size());
    return false;
  }
  for (size_t gi = 0; gi < m.param_groups.size(); ++gi) {
    nlohmann::json g = m.param_groups[gi];  // as DDPTrace saw it, then as this step's step() read it
    if (gi < rec.group_changes.size()) g.update(rec.group_changes[gi]);
    // decoupled_weight_decay=True is AdamW's own arithmetic (torch 2.x's AdamW says so in its groups).
    const bool decoupled = g.contains("decoupled_weight_decay") && g.at("decoupled_weight_decay").is_boolean() &&
                           g.at("decoupled_weight_decay").get<bool>();
    if (decoupled && cls == "Adam") {
      *why = "Adam with decoupled_weight_decay=True is not modelled (AdamW is)";
      return false;
    }
    for (const char* flag : {"amsgrad", "maximize", "capturable", "differentiable", "fused"}) {
      if (g.contains(flag) && g.at(flag).is_boolean() && g.at(flag).get<bool>()) {
        *why = cls + " with " + flag + "=True is not modelled";
        return false;
      }
    }
    const double lr = gi < rec.lr.size() ? rec.lr[gi] : g.value("lr", 0.0);
    std::vector<Parameter*> group;
    for (const auto& idx : g.at("params")) group.push_back(&ps[idx.get<size_t>()]);
    const auto state = [&](const Parameter* p, const char* key) { return rec.find("state", p->name + "/" + key); };
    if (cls == "SGD") {
      SGDOptions o;
      o.lr = lr;
      o.momentum = g.value("momentum", 0.0);
      o.dampening = g.value("dampening", 0.0);
      o.weight_decay = g.value("weight_decay", 0.0);
      o.nesterov = g.value("nesterov", false);
      SGD sgd(group, o);
      for (size_t j = 0; j < group.size(); ++j)
        if (const safetensors::Tensor* buf = state(group[j], "momentum_buffer")) {
          if (static_cast<int64_t>(buf->data.size()) != group[j]->numel()) {
            *why = "SGD's momentum_buffer of '" + group[j]->name + "' is not the parameter's shape";
            return false;
          }
          sgd.set_momentum_buffer(j, as_matrix(buf->data));
        }
      sgd.step();
      for (size_t j = 0; j < group.size(); ++j)
        if (const Matrix* buf = sgd.momentum_buffer(j)) keep(group[j], "momentum_buffer", *buf);
    } else {
      AdamOptions o;
      o.lr = lr;
      if (g.contains("betas") && g.at("betas").is_array() && g.at("betas").size() == 2) {
        o.beta1 = g.at("betas")[0].get<double>();
        o.beta2 = g.at("betas")[1].get<double>();
      }
      o.eps = g.value("eps", 1e-8);
      o.weight_decay = g.value("weight_decay", 0.0);
      o.torch2 = lerp_adam(m.torch_version);
      std::unique_ptr<Adam> adam = cls == "AdamW" ? std::make_unique<AdamW>(group, o) : std::make_unique<Adam>(group, o);
      for (size_t j = 0; j < group.size(); ++j) {
        const safetensors::Tensor* m1 = state(group[j], "exp_avg");
        const safetensors::Tensor* m2 = state(group[j], "exp_avg_sq");
        auto it = rec.state_steps.find(group[j]->name);
        if ((m1 && static_cast<int64_t>(m1->data.size()) != group[j]->numel()) ||
            (m2 && static_cast<int64_t>(m2->data.size()) != group[j]->numel())) {
          *why = cls + "'s state of '" + group[j]->name + "' is not the parameter's shape";
          return false;
        }
        if (m1 && m2 && it != rec.state_steps.end() && it->second > 0)
          adam->set_state(j, as_matrix(m1->data), as_matrix(m2->data), it->second);
      }
      adam->step();
      for (size_t j = 0; j < group.size(); ++j)
        if (adam->step_count(j) > 0) {
          keep(group[j], "exp_avg", adam->exp_avg(j));
          keep(group[j], "exp_avg_sq", adam->exp_avg_sq(j));
        }
    }
  }
  after->clear();
  for (Parameter& p : ps) after->push_back(std::move(p.value));
  return true;
}

}  // namespace ddplab::check
