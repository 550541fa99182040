#include "src/ddp/hooks/powersgd.h"

#include <algorithm>
#include <map>
#include <stdexcept>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "src/ddp/hooks/powersgd_math.h"
#include "src/base/errors.h"
#include "src/data/torch_rng.h"

namespace ddplab::ddp {
namespace {

using powersgd::Matrix;

// One gradient of the bucket viewed as torch's tensor.view(shape[0], -1).
struct View {
  size_t offset;
  int64_t n, m, k;  // rows, columns, min(n, m, rank)
};

class PowerSgdHook : public CommHook {
 public:
  explicit PowerSgdHook(const CommHookOptions& o) : o_(o), rng_(static_cast<uint32_t>(o.powersgd_random_seed)) {}

  std::string name() const override { return "powersgd"; }

  HookReport run(GradBucket& bucket, comm::Communicator& comm) override {
    const int ws = comm.world_size();
    float* input = bucket.buffer;
    HookReport report;
    if (iter_ < o_.powersgd_start_iter) {  // default._allreduce_fut: tensor.div_(ws), then SUM
      const int64_t at = iter_;
      maybe_increase_iter(bucket);
      const float d = static_cast<float>(ws);
      for (size_t i = 0; i < bucket.numel; ++i) input[i] = input[i] / d;
      comm.all_reduce(input, bucket.numel, comm::ReduceOp::sum);
      report.sent = fmt::format("float32 x {} (iteration {} < start_powerSGD_iter {}: plain all-reduce)", bucket.numel,
                                at, o_.powersgd_start_iter);
      report.bytes = bucket.numel * sizeof(float);
      return report;
    }
    const size_t idx = bucket.index;
    std::vector<float> input_cp;
    if (o_.powersgd_error_feedback) {
      auto it = error_.find(idx);
      if (it != error_.end()) {
        for (size_t i = 0; i < bucket.numel; ++i) input[i] = input[i] + it->second[i];
      } else {
        error_[idx].assign(bucket.numel, 0.0f);
      }
      input_cp.assign(input, input + bucket.numel);
    }

    // Which gradients are worth compressing (_should_compress), in bucket order.
    std::vector<View> compress, uncompressed;
    size_t ps_size = 0, qs_size = 0, unc_size = 0;
    for (size_t p = 0; p < bucket.shapes.size(); ++p) {
      const auto& shape = bucket.shapes[p];
      if (shape.empty())
        throw UsageError(
            fmt::format("--comm-hook powersgd: parameter {} is 0-dimensional; "
                        "powerSGD_hook views each gradient as (shape[0], -1)",
                        p < bucket.names.size() ? bucket.names[p] : std::to_string(p)));
      int64_t numel = 1;
      for (int64_t d : shape) numel *= d;
      const int64_t n = shape[0], m = n == 0 ? 0 : numel / n;
      const int64_t k = std::min({n, m, o_.powersgd_rank});
      const View v{bucket.offsets[p], n, m, k};
      if ((n + m) * k * o_.powersgd_min_compression_rate < n * m) {
        compress.push_back(v);
        ps_size += static_cast<size_t>(n * k);
        qs_size += static_cast<size_t>(m * k);
      } else {
        uncompressed.push_back(v);
        unc_size += static_cast<size_t>(numel);
      }
    }
    // shape_to_tensors: a dict keyed by the (n, m) shape, so the matrices go grouped by shape in first-seen
    // order (also without batch_tensors_with_same_shape); P and Q memory follow that order.
    std::vector<View> mats;
    for (size_t i = 0; i < compress.size(); ++i) {
      bool seen = false;
      for (size_t j = 0; j < i; ++j) seen = seen || (compress[j].n == compress[i].n && compress[j].m == compress[i].m);
      if (seen) continue;
      for (size_t j = i; j < compress.size(); ++j)
        if (compress[j].n == compress[i].n && compress[j].m == compress[i].m) mats.push_back(compress[j]);
    }

    std::vector<float> unc;
    unc.reserve(unc_size);
    for (const View& v : uncompressed) unc.insert(unc.end(), input + v.offset, input + v.offset + v.n * v.m);

    const bool randomize = !o_.powersgd_warm_start || !p_memory_.count(idx);
    std::vector<float>& pmem = p_memory_[idx];
    std::vector<float>& qmem = q_memory_[idx];
    if (randomize) {
      pmem.assign(ps_size, 0.0f);
      qmem.assign(qs_size, 0.0f);
    }
    std::vector<Matrix> ms, ps, qs;
    size_t po = 0, qo = 0;
    for (const View& v : mats) {
      ms.push_back({input + v.offset, v.n, v.m, v.m, 1});
      ps.push_back({pmem.data() + po, v.n, v.k, v.k, 1});
      qs.push_back({qmem.data() + qo, v.m, v.k, v.k, 1});
      po += static_cast<size_t>(v.n * v.k);
      qo += static_cast<size_t>(v.m * v.k);
    }
    if (!randomize) {
      for (const Matrix& q : qs) powersgd::orthogonalize(q);
    } else {  // under fork_rng: a generator of its own, the global one untouched
      Generator g(static_cast<uint64_t>(rng_.randint(1000000000)));
      for (const Matrix& q : qs) {
        g.normal_(q.data, q.rows * q.cols);  // torch.randn(1, m, k), copied into q
        powersgd::orthogonalize(q);
      }
    }
    for (size_t i = 0; i < ms.size(); ++i) powersgd::bmm(ms[i], qs[i], ps[i]);

    const float d = static_cast<float>(ws);
    comm.all_reduce(unc.data(), unc.size(), comm::ReduceOp::sum);  // also when empty: keeps ranks in step
    size_t u = 0;
    for (const View& v : uncompressed) {
      for (int64_t i = 0; i < v.n * v.m; ++i) input[v.offset + static_cast<size_t>(i)] = unc[u++] / d;
    }
    comm.all_reduce(pmem.data(), pmem.size(), comm::ReduceOp::sum);
    for (const Matrix& p : ps) powersgd::orthogonalize(p);
    for (size_t i = 0; i < ms.size(); ++i) powersgd::bmm(ms[i].t(), ps[i], qs[i]);
    comm.all_reduce(qmem.data(), qmem.size(), comm::ReduceOp::sum);
    for (float& q : qmem) q = q / d;
    for (size_t i = 0; i < ms.size(); ++i) powersgd::bmm(ps[i], qs[i].t(), ms[i]);

    if (o_.powersgd_error_feedback) {
      std::vector<float>& e = error_[idx];
      for (size_t i = 0; i < bucket.numel; ++i) e[i] = input_cp[i] - input[i];
    }
    if (!o_.powersgd_warm_start) {
      p_memory_.clear();
      q_memory_.clear();
    }
    maybe_increase_iter(bucket);

    std::string shapes;
    for (const View& v : mats) shapes += fmt::format("{}{}x{}", shapes.empty() ? "" : ", ", v.n, v.m);
    report.sent = fmt::format("float32: {} as is, P {} + Q {} (rank {}: {})", unc.size(), pmem.size(), qmem.size(),
                              o_.powersgd_rank, mats.empty() ? "nothing compressed" : shapes);
    report.bytes = (unc.size() + pmem.size() + qmem.size()) * sizeof(float);
    return report;
  }

 private:
  void maybe_increase_iter(const GradBucket& b) {
    if (b.is_last) ++iter_;
  }

  CommHookOptions o_;
  powersgd::NumpyRandomState rng_;
  int64_t iter_ = 0;
  std::map<size_t, std::vector<float>> error_, p_memory_, q_memory_;
};

}  // namespace

std::unique_ptr<CommHook> make_powersgd_hook(const CommHookOptions& o) {
  if (o.powersgd_rank < 1 || o.powersgd_rank > 2)
    throw UsageError(fmt::format(
        "--powersgd-rank must be 1 or 2 (got {}): from 3 on torch orthogonalises with LAPACK's QR, which ddplab "
        "does not reproduce",
        o.powersgd_rank));
  if ((o.powersgd_error_feedback || o.powersgd_warm_start) && o.powersgd_start_iter <= 1)
    throw UsageError(
        fmt::format("--powersgd-start-iter must be > 1 with error feedback or warm start (got {}), as "
                    "PowerSGDState requires: DDP rebuilds its buckets after iteration 0",
                    o.powersgd_start_iter));
  if (o.powersgd_random_seed > 0xffffffffULL)
    throw UsageError(
        fmt::format("PowerSGD random_seed must be in [0, 4294967295] (got {}): numpy's RandomState takes 32 bits",
                    o.powersgd_random_seed));
  return std::make_unique<PowerSgdHook>(o);
}

}  // namespace ddplab::ddp
