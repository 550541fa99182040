// Filling a report::ReportData from what the programs already computed (src/report/html_report.h).
#include <algorithm>
#include <utility>

#include <fmt/format.h>

#include "src/collective/allreduce.h"
#include "src/collective/ring.h"
#include "src/ddp/reducer.h"
#include "src/ddp/trainer.h"
#include "src/report/explain.h"
#include "src/report/html_report.h"
#include "src/report/per_rank.h"
#include "src/report/timeline.h"

namespace ddplab::report {

Row cmp_row(const std::string& name, const float* a, const float* b, int64_t n) {
  Row r{cmp(name, a, b, n)};
  r.max_ulps = r.cmp.max_ulps;
  return r;
}

std::vector<Row> cmp_model_rows(const Module& a, const Module& b) {
  std::vector<Row> rows;
  const auto pa = a.parameters(), pb = b.parameters();
  for (size_t i = 0; i < pa.size(); ++i)
    rows.push_back(cmp_row(pa[i]->name, pa[i]->data(), pb[i]->data(), pa[i]->numel()));
  const auto ba = a.buffers(), bb = b.buffers();
  for (size_t i = 0; i < ba.size(); ++i) {
    if (ba[i]->is_int64) {
      const float x = static_cast<float>(ba[i]->count), y = static_cast<float>(bb[i]->count);
      rows.push_back(cmp_row(ba[i]->name, &x, &y, 1));
    } else {
      rows.push_back(cmp_row(ba[i]->name, ba[i]->value.data(), bb[i]->value.data(), ba[i]->value.size()));
    }
  }
  return rows;
}

namespace {

Bucket bucket_of(const std::vector<const Parameter*>& params, const std::vector<size_t>& which) {
  Bucket b;
  for (const size_t i : which) {
    b.params.push_back(params[i]->name);
    b.numels.push_back(params[i]->numel());
    b.numel += params[i]->numel();
  }
  return b;
}

}  // namespace

BucketLayout first_layout(const Module& model) {
  // Iteration 0: DDP's single bucket with every parameter in model order (src/ddp/reducer.h).
  const auto params = model.parameters();
  std::vector<size_t> all(params.size());
  for (size_t i = 0; i < all.size(); ++i) all[i] = i;
  return {"iteration 0: one bucket, every parameter in model order", {bucket_of(params, all)}};
}

BucketLayout layout_of(const std::string& title, const ddp::Reducer& reducer, const Module& model) {
  const auto params = model.parameters();
  BucketLayout out{title, {}};
  for (size_t j = 0; j < reducer.num_buckets(); ++j) out.buckets.push_back(bucket_of(params, reducer.bucket(j).params));
  return out;
}

RingExplain ring_data(const std::string& title, const std::vector<std::vector<float>>& inputs) {
  RingExplain x;
  static_cast<RingTrace&>(x) = trace_ring(inputs);
  x.title = title;
  return x;
}

RingExplain explain_data(const ddp::Config& cfg, const std::vector<float*>& bufs, size_t n) {
  const char* how =
      cfg.average == ddp::Average::postdivide ? "raw gradients (postdivide)" : "gradients * float(1/world_size)";
  std::vector<std::vector<float>> inputs;
  if (n <= 16) {  // a few floats: the real bucket, chunked as Gloo chunks it
    for (float* b : bufs) inputs.emplace_back(b, b + n);
    return ring_data(fmt::format("Iteration 0's single bucket ({} floats, {})", n, how), inputs);
  }
  // Too many to draw: the bucket's last 2 x world_size floats (the end of the last layer, as --explain picks
  // its bias), run through the ring on their own as if they were a bucket: two floats per rank's chunk.
  // Their chunking differs from the real bucket's; the additions of each element are the same kind.
  const size_t count = std::min<size_t>(n, 2 * bufs.size());
  for (float* b : bufs) inputs.emplace_back(b + n - count, b + n - count + count);
  const auto [name, numel] = ddp::last_parameter(cfg);
  const std::string layer = name.substr(0, name.rfind('.'));
  return ring_data(
      fmt::format("The last {} floats of iteration 0's bucket ({}), from the first all-reduce ({}), "
                  "run through the ring as a bucket of their own",
                  count, count <= static_cast<size_t>(numel) ? name : "the end of " + layer + ".weight and " + name,
                  how),
      inputs);
}

Timing timing_of(const Timeline& t, int64_t world_size) {
  Timing out;
  out.lanes = {"iteration", "compute (rank 0)", "communication"};
  for (const TraceEvent& e : t.events) {
    if (e.pid != 0) continue;  // every rank runs the same schedule
    svg::Bar b;
    b.label = e.name;
    b.start = e.ts;
    b.duration = e.dur;
    b.instant = e.ph == 'i';
    if (e.cat == "step") {
      b.lane = 0;
      b.colour = e.name.rfind("iteration 0", 0) == 0 ? "#cfc6e6" : "#b9e0d0";
    } else {
      b.lane = e.tid == 0 ? 1 : 2;
      b.colour = e.name.rfind("forward", 0) == 0     ? "#56B4E9"
                 : e.name.rfind("backward", 0) == 0  ? "#0072B2"
                 : e.name.rfind("optimizer", 0) == 0 ? "#8c8c8c"
                 : b.instant                         ? "#D55E00"
                                                     : "#E69F00";
    }
    out.bars.push_back(b);
  }
  out.summary = timeline_summary(t, world_size);
  return out;
}

svg::Series loss_series(const std::string& name, const std::vector<float>& losses) {
  svg::Series s;
  s.name = name;
  for (const float l : losses) s.y.push_back(l);
  return s;
}

void add_simulation(ReportData& d, const ddp::Config& cfg, const ddp::SimResult& res) {
  for (int64_t r = 0; r < cfg.world_size; ++r) {
    std::vector<float> l;
    for (const ddp::BatchLog& b : res.log) {
      if (b.rank == r) l.push_back(b.loss);
    }
    d.losses.push_back(loss_series(fmt::format("rank {}", r), l));
  }
  if (!res.single_losses.empty()) {
    d.losses.push_back(loss_series("one device", res.single_losses));
    d.losses.back().dashed = true;
    d.losses.back().colour = "#222222";
  }
  const Module& rank0 = res.replicas[0]->model;
  // The tables ddp_sim prints (src/report/report.cc): the last rank, and any rank that differs.
  for (size_t k = 1; k < res.replicas.size(); ++k) {
    auto rows = cmp_model_rows(res.replicas[k]->model, rank0);
    const bool exact = std::all_of(rows.begin(), rows.end(), [](const Row& r) { return r.cmp.exact; });
    if (k + 1 == res.replicas.size() || !exact) {
      d.tables.push_back(
          {fmt::format("replica {} vs replica 0 after {} optimizer step{}", k, res.optimizer_steps,
                       res.optimizer_steps == 1 ? "" : "s"), std::move(rows)});
    }
  }
  if (res.single_device) {
    d.tables.push_back({"DDP replica 0 vs one device trained on the union of the shards",
                        cmp_model_rows(rank0, res.single_device->model)});
  }
  std::vector<const Module*> models;
  for (const auto& rep : res.replicas) models.push_back(&rep->model);
  add_per_rank(d, cfg, "", models);
  d.layouts.push_back(first_layout(rank0));
  d.layouts.push_back(layout_of(fmt::format("from iteration 1: rebuilt in gradient-ready order (first bucket 1 MiB, "
                                            "then up to --bucket-cap-mb {})",
                                            cfg.bucket_cap_mb),
                                *res.replicas[0]->reducer, rank0));
}

}  // namespace ddplab::report
