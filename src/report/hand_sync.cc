// ddp_sim --hand-sync's comparison with DDP (hand_sync.h).
#include "src/report/hand_sync.h"

#include <algorithm>

#include <fmt/format.h>

#include "src/report/report.h"

namespace ddplab {

namespace {

const char* arithmetic(ddp::Average a) {
  switch (a) {
    case ddp::Average::predivide: return "grad * float(1/world_size) then SUM (DDP's arithmetic)";
    case ddp::Average::postdivide: return "SUM then / world_size";
    case ddp::Average::multiply: return "SUM then * float(1/world_size)";
    case ddp::Average::divide_first: return "grad / world_size then SUM";
    case ddp::Average::avg: break;
  }
  return "the backend's average";
}

bool power_of_two(int64_t n) { return n > 0 && (n & (n - 1)) == 0; }

}  // namespace

std::string describe_hand_sync(const ddp::Config& cfg, const ddp::SimResult& res) {
  const Module& m = res.replicas[0]->model;
  int64_t numel = 0;
  for (const Parameter* p : m.parameters()) numel += p->numel();
  const size_t buckets = res.replicas[0]->reducer->num_buckets();
  std::string layout;
  switch (cfg.hand_sync) {
    case ddp::HandSync::per_parameter: layout = fmt::format("an all-reduce per parameter ({} a step)", buckets); break;
    case ddp::HandSync::flat: layout = fmt::format("one flat buffer of every gradient in model order ({} floats)", numel); break;
    case ddp::HandSync::buckets:
      layout = fmt::format("{} bucket{} of at most {} MiB in reverse model order, never rebuilt: {}", buckets,
                           buckets == 1 ? "" : "s", cfg.bucket_cap_mb, res.replicas[0]->reducer->describe());
      break;
    case ddp::HandSync::none: return "";
  }
  return fmt::format("hand-written sync (no DDP): {}, {}; rank 0's weights broadcast at the start{}", layout,
                     arithmetic(cfg.average),
                     cfg.broadcast_buffers && !m.buffers().empty() ? ", its buffers before every forward" : "");
}

ddp::Config ddp_twin(const ddp::Config& cfg) {
  ddp::Config twin = cfg;
  twin.hand_sync = ddp::HandSync::none;
  twin.average = ddp::Average::predivide;
  twin.bucket_cap_mb = 25.0;
  return twin;
}

ddp::SimHooks keep_first_average(std::vector<float>* grad) {
  ddp::SimHooks hooks;
  hooks.after_allreduce = [grad](const std::vector<ddp::Reducer*>& reducers) {
    if (!grad->empty()) return;
    for (const Parameter* p : reducers[0]->params())
      if (p->has_grad) grad->insert(grad->end(), p->grad.data(), p->grad.data() + p->grad.size());
  };
  return hooks;
}

std::string hand_vs_ddp(const ddp::Config& cfg, const ddp::SimResult& hand, const ddp::SimResult& ddp,
                        const std::vector<float>& hand_grad, const std::vector<float>& ddp_grad) {
  const CmpResult g = cmp("gradient", hand_grad.data(), ddp_grad.data(),
                          static_cast<int64_t>(std::min(hand_grad.size(), ddp_grad.size())));
  const int64_t values = g.numel, same = g.numel - g.num_different;
  std::string out = fmt::format(
      "# hand-written sync vs DDP(model)\nstep 0's averaged gradient (the same weights and batches in both runs): {} "
      "of {} values are DDP's bits{}\nrank 0 after {} optimizer step{}:\n",
      same, values, same == values ? "" : fmt::format(" (the rest within {} ulps)", g.max_ulps), hand.optimizer_steps,
      hand.optimizer_steps == 1 ? "" : "s");
  bool params_equal = true;
  for (const CmpResult& r : cmp_models(hand.replicas[0]->model, ddp.replicas[0]->model)) {
    out += format_cmp(r) + "\n";
    params_equal = params_equal && r.exact;
  }
  if (params_equal && same != values)
    out += "(the parameters agree although the gradients do not: lr times a difference of a few ulps of the gradient "
           "is below\nthe parameters' own rounding here; more steps or a larger lr carry it into them)\n";
  const int64_t ws = cfg.world_size;
  if (ws == 1) return out + "world_size 1: nothing is averaged, so both are the single replica's run.\n";
  if (ws == 2 && same == values)
    return out + "at 2 ranks every averaging is DDP's: a + b = b + a in whatever order the all-reduce adds, and "
                 "halving is exact\n(x * 0.5 = x / 2), so neither the layout nor the arithmetic moves a bit.\n";
  std::string why = same == values ? "why the bits agree at step 0:\n" : "where the bits differ at step 0:\n";
  if (cfg.average == ddp::Average::predivide)
    why += "  the arithmetic is DDP's (grad * float(1/world_size) then SUM)\n";
  else if (power_of_two(ws))
    why += fmt::format("  the arithmetic: {} against DDP's grad * float(1/world_size) then SUM: 1/{} is exact in "
                       "float, so this part moves no bit\n",
                       arithmetic(cfg.average), ws);
  else
    why += fmt::format("  the arithmetic: {} against DDP's grad * float(1/world_size) then SUM: float(1/{}) is "
                       "rounded, and a division, or a multiply after the sum, rounds elsewhere\n",
                       arithmetic(cfg.average), ws);
  if (hand.buckets_first == ddp.buckets_first)
    why += "  the order: the same buffer as DDP's iteration-0 bucket (every parameter in model order), so the same "
           "additions;\n  from iteration 1 DDP adds in its rebuilt buckets (gradient-ready order) instead\n";
  else
    why += fmt::format(
        "  the order: Gloo's ring splits each all-reduce into {} chunks by that call's own size, each chunk summed "
        "from\n  another rank; an element's {} values are added in an order set by its position in its buffer, "
        "and this\n  layout puts it elsewhere than DDP's bucket ({})\n",
        ws, ws, ddp.buckets_first);
  return out + why;
}

}  // namespace ddplab
