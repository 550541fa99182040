// bazel run //verify:ddp_verify -- --backend gloo --nproc 4
// The DDP step for real: one OS process per rank over Gloo (CPU) or NCCL (GPUs). Rank 0 gathers every
// rank's parameters, runs the simulator on the same configuration and prints both in the cmp table.
// Exit: 0 all rows approximately equal and ranks bitwise identical; 1 otherwise or a rank failed;
// 2 bad input or rendezvous; 3 backend unavailable.
#include <chrono>
#include <cstdio>
#include <cstring>
#include <optional>
#include <string>
#include <utility>

#include <fmt/format.h>

#include "src/ddp/config.h"
#include "src/ddp/join.h"
#include "src/ddp/trainer.h"
#include "src/ddp/zero.h"
#include "src/base/flags.h"
#include "src/gpt/train.h"
#include "src/base/io.h"
#include "src/launch/run_flags.h"
#include "src/launch/runner.h"
#include "src/nccl/gpu_trainer.h"
#include "src/base/parallel.h"
#include "src/report/gpt_output.h"
#include "src/report/html_report.h"
#include "src/report/per_rank.h"
#include "src/report/report.h"
#include "src/report/timeline.h"
#include "src/launch/compute.h"

namespace {

using namespace ddplab;

std::string head() {
  return "usage: ddp_verify --backend " + dist::backend_choices(dist::Backends::real) +
         R"( --nproc N [flags]     (spawns N local ranks)
       torchrun --no-python --nproc-per-node N ddp_verify [flags]   (ranks meet through torchrun's TCPStore)
       RANK=r WORLD_SIZE=N ... ddp_verify --store redis://HOST:PORT|tcp://HOST:PORT [flags]   (any host)
       mpirun -np N ddp_verify --store file:/shared/dir [flags]
Runs the DDP step with one process per rank and compares it with ddp_sim's.
)";
}
constexpr const char* kCompute = R"(where the model runs:
  --compute host|device     host (default): every model on the CPU, as on Gloo, each collective through the
                            backend (NCCL: staged on the rank's GPU); device (--backend nccl): parameters,
                            gradients and buckets stay on the GPU (Linear and ReLU layers, --loss mse only)
)";
constexpr const char* kTail = R"(output:
  --dump-params FILE        every rank's final parameters, sampler indices, losses, and (models with them)
                            buffers and test predictions: ddp_sim's JSON
  --quiet                   no per-batch lines
  --report FILE.html        (rank 0) one self-contained HTML page: losses per rank, the cmp tables, buckets,
                            the simulator's ring all-reduce, the --trace timeline, the command line
)";

// Every rank's `mine` (buffers or Dropout masks): index r holds rank r's.
std::vector<report::NamedTensors> gather_tensors(comm::Communicator& comm, const report::NamedTensors& mine,
                                                 int world_size) {
  std::vector<report::NamedTensors> all(static_cast<size_t>(world_size));
  for (auto& t : all) t.names = mine.names;
  for (const std::vector<float>& v : mine.values) {
    auto got = comm::all_gather_floats(comm, v);
    for (size_t r = 0; r < got.size(); ++r) all[r].values.push_back(std::move(got[r]));
  }
  return all;
}

// --model gpt: this rank's GptRank through the one real-rank path (ddp::train_over); rank 0 gathers every
// rank's parameters and logs, prints the GPT's summary, and compares them with the simulator's ranks.
int gpt_body(const Flags& flags, const ddp::Config& cfg, const TextData& data, dist::Rank& rank) {
  comm::Communicator& comm = *rank.comm;
  const int ws = rank.env.world_size;
  if (rank.env.rank == 0) {
    fmt::print("ddp_verify: {} backend, {} ranks | {}\n{}", rank.backend, ws, ddp::describe(cfg),
               ddp::describe_notes(cfg));
  }
  std::fflush(stdout);
  gpt::GptRank me(cfg, data, rank.env.rank);
  double train_seconds = 0;
  const ddp::TrainLog res = ddp::train_over(cfg, comm, me, false, &train_seconds);

  // Rank 0 gathers every rank's parameters and logs (every rank ran as many steps).
  report::RankRecord mine = report::record_of(me);
  std::vector<float> flat, ev;
  for (const auto& p : mine.params) flat.insert(flat.end(), p.begin(), p.end());
  for (const gpt::EvalLog& e : mine.log.evals) ev.insert(ev.end(), {e.train, e.val});
  const auto params = comm::all_gather_floats(comm, flat);
  const auto losses = comm::all_gather_floats(comm, mine.log.losses);
  const auto norms = comm::all_gather_floats(comm, mine.log.clip_norms);
  const auto evals = comm::all_gather_floats(comm, ev);
  float verdict = 0.0f;
  if (rank.env.rank == 0) {
    std::vector<report::RankRecord> real(static_cast<size_t>(ws));
    for (size_t r = 0; r < real.size(); ++r) {
      real[r].names = mine.names;
      size_t off = 0;
      for (const auto& p : mine.params) {
        real[r].params.emplace_back(params[r].begin() + static_cast<std::ptrdiff_t>(off),
                                    params[r].begin() + static_cast<std::ptrdiff_t>(off + p.size()));
        off += p.size();
      }
      real[r].log.losses = losses[r];
      real[r].log.clip_norms = norms[r];
      for (size_t e = 0; e < mine.log.evals.size() && 2 * e + 1 < evals[r].size(); ++e) {
        real[r].log.evals.push_back({mine.log.evals[e].step, evals[r][2 * e], evals[r][2 * e + 1]});
      }
    }
    if (!flags.get_bool("quiet", false)) {
      fmt::print("{}", report::gpt_summary(cfg, real));
      for (const std::string& n : res.notes) fmt::print("{}\n", n);
    }
    if (!res.hook_reports.empty()) fmt::print("{}\n", ddp::format_hook_reports(cfg.comm_hook.name, res.hook_reports));
    const auto s0 = std::chrono::steady_clock::now();
    const gpt::GptSimResult sim = gpt::simulate(cfg, data);
    const double sim_ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - s0).count();
    fmt::print("timing: real training {:.1f} ms (CPU, {}), simulator {:.1f} ms (CPU)\n", train_seconds * 1e3,
               rank.backend, sim_ms);
    std::vector<report::RankRecord> simulated;
    for (const auto& r : sim.ranks) simulated.push_back(report::record_of(*r));
    const std::string error = res.error ? ddp::unfinished_reduction_message(*res.error) : "";
    bool ok = false;
    fmt::print("{}", report::gpt_sim_vs_real(cfg, real, simulated, error,
                                             sim.error ? ddp::unfinished_reduction_message(*sim.error) : "", &ok));
    verdict = ok ? 0.0f : 1.0f;
    const std::string dump = flags.get_string("dump-params", "");
    if (!dump.empty()) {
      if (std::string why = write_file_atomic(dump, report::gpt_dump_json(cfg, real, rank.backend, error)); !why.empty()) {
        std::fprintf(stderr, "ddp_verify: --dump-params: %s\n", why.c_str());
        verdict = 1.0f;
      }
    }
    if (res.error) {  // torch's ranks fail here: so do ours, after showing that they failed alike
      std::fprintf(stderr, "ddp_verify: RuntimeError at %s\n", error.c_str());
      verdict = 1.0f;
    }
  }
  comm.broadcast(&verdict, 1, 0);  // every rank exits with rank 0's verdict
  return verdict == 0.0f ? 0 : 1;
}

int body(const Flags& flags, const ddp::Config& cfg, dist::Rank& rank, const std::vector<std::string>& argv) {
  const dist::RankEnv& env = rank.env;
  const std::string& backend = rank.backend;
  auto& comm = rank.comm;
  const auto args = ddp::to_args(cfg);
  const bool quiet = flags.get_bool("quiet", false);
  if (env.rank == 0) {
    fmt::print("ddp_verify: {} backend, {} ranks | {}\n{}", backend, env.world_size, ddp::describe(cfg),
               ddp::describe_notes(cfg));
  }
  std::fflush(stdout);
  // --compute device keeps the model on the GPU (src/nccl/gpu_trainer.h); host (the default) trains on the CPU.
  const bool on_gpu = flags.get_string("compute", "host") == "device";  // checked before the ranks started
  // On the host the model computes on the CPU whatever the backend: the collectives alone go through NCCL.
  const ddp::RankResult mine = on_gpu ? dist::train_rank_on_device(cfg, *comm, cfg.kernels)
                                      : ddp::train_rank(cfg, *comm, cpu_kernels(cfg.kernels));
  if (mine.error) {  // every rank stops in the same forward, as torch's do (the unused parameters are the model's)
    if (env.rank == 0) {
      std::fprintf(stderr, "ddp_verify: RuntimeError at %s\n", ddp::unfinished_reduction_message(*mine.error).c_str());
    }
    return 1;
  }
  if (!quiet) {
    std::string lines;
    for (const auto& l : mine.log) lines += ddp::progress_line(l, cfg.epochs) + "\n";
    std::fputs(lines.c_str(), stdout);  // one write: ranks' lines do not cut into each other
    std::fflush(stdout);
  }

  // Rank 0 gathers everyone's parameters (and, for the dump, indices and losses).
  std::vector<float> flat;
  for (const Parameter* p : mine.replica->model.parameters())
    flat.insert(flat.end(), p->data(), p->data() + p->numel());
  std::vector<float> everyone(flat.size() * static_cast<size_t>(env.world_size));
  comm->all_gather(flat.data(), flat.size() * sizeof(float), everyone.data());
  // For the dump, as ddp_sim writes it: state_dicts by rank, sampler indices by [epoch][rank], losses by rank.
  const auto params_json =
      comm::all_gather_strings(*comm, json_params(std::as_const(mine.replica->model).parameters()));
  std::vector<std::string> indices_json;
  for (const auto& epoch : mine.sampler_indices) {
    indices_json.push_back(fmt::format(
        "[{}]", fmt::join(comm::all_gather_strings(*comm, fmt::format("[{}]", fmt::join(epoch, ", "))), ", ")));
  }
  // Buffers, the last Dropout masks and the test predictions (models and datasets that have them), likewise.
  const Module& my_model = mine.replica->model;
  const auto buffers = gather_tensors(*comm, report::buffer_values(my_model), env.world_size);
  const auto masks = gather_tensors(*comm, report::dropout_masks(my_model), env.world_size);
  std::vector<std::string> buffers_json;
  if (!my_model.buffers().empty()) buffers_json = comm::all_gather_strings(*comm, json_buffers(my_model.buffers()));
  std::vector<int64_t> test_correct(static_cast<size_t>(env.world_size));
  comm->all_gather(&mine.test_correct, sizeof(int64_t), test_correct.data());
  if (mine.test_correct < 0) test_correct.clear();  // not --dataset digits (every rank alike)
  // --zero: every rank's optimizer state (floats), for the ZeroRedundancyOptimizer block.
  const int64_t my_state = mine.replica->optimizer->state_numel();
  std::vector<int64_t> state_numel(static_cast<size_t>(env.world_size));
  if (cfg.zero) comm->all_gather(&my_state, sizeof(int64_t), state_numel.data());
  // Every rank logs as many batches (DistributedSampler gives each the same number of samples), but with
  // --uneven rank r logs epochs x rank_batches(r): gathered padded to rank 0's count (every rank knows all).
  std::vector<float> my_losses;
  for (const auto& l : mine.log) my_losses.push_back(l.loss);
  const size_t most = static_cast<size_t>(cfg.epochs * ddp::rank_batches(cfg, 0));
  my_losses.resize(std::max(most, my_losses.size()));
  std::vector<float> all_losses(my_losses.size() * static_cast<size_t>(env.world_size));
  comm->all_gather(my_losses.data(), my_losses.size() * sizeof(float), all_losses.data());
  std::vector<std::vector<float>> losses(static_cast<size_t>(env.world_size));
  std::vector<std::string> losses_json;
  for (size_t r = 0; r < losses.size(); ++r) {
    const auto first = all_losses.begin() + static_cast<std::ptrdiff_t>(r * my_losses.size());
    const auto count = static_cast<std::ptrdiff_t>(cfg.epochs * ddp::rank_batches(cfg, static_cast<int64_t>(r)));
    losses[r].assign(first, first + count);
    std::vector<std::string> items;
    for (float l : losses[r]) items.push_back(json_float(l));
    losses_json.push_back(fmt::format("[{}]", fmt::join(items, ", ")));
  }

  float verdict = 0.0f;
  if (env.rank == 0) {
    const auto sim_start = std::chrono::steady_clock::now();
    ddp::Config sim_cfg = cfg;  // the replicas keep a reference: it outlives `sim`
    sim_cfg.threads = threads_from_flags(flags);
    const std::string report_path = flags.get_string("report", "");
    report::ReportData page;
    ddp::SimHooks hooks;
    if (!report_path.empty()) {  // the simulator's first all-reduce, drawn as --explain shows it
      hooks.before_allreduce = [&](int64_t sync, size_t bucket, const std::vector<float*>& bufs, size_t n) {
        if (sync == 0 && bucket == 0 && bufs.size() >= 2 && bufs.size() <= 8)
          page.ring = report::explain_data(cfg, bufs, n);
      };
    }
    const ddp::SimResult sim = ddp::simulate(sim_cfg, false, hooks);
    const double sim_ms =
        std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - sim_start).count();
    bool ok = true, buffers_equal = true;
    const std::string by_design = ddp::ranks_differ_by_design(cfg);  // then each rank against its simulated one
    std::string report = fmt::format("timing: real training {:.1f} ms ({}, {}), simulator {:.1f} ms (CPU)\n",
                                     mine.train_seconds * 1e3, on_gpu ? "GPU" : "CPU", backend, sim_ms);
    for (int r = 0; r < env.world_size; ++r) {
      const auto ps = sim.replicas[static_cast<size_t>(r)]->model.parameters();
      const float* real = everyone.data() + static_cast<size_t>(r) * flat.size();
      const float* real0 = everyone.data();
      std::vector<CmpResult> sim_rows, rank_rows, buffer_rows;  // buffer_rows: real rank r's vs rank 0's
      for (const Parameter* p : ps) {
        sim_rows.push_back(cmp(p->name, p->data(), real, p->numel()));
        rank_rows.push_back(cmp(p->name, real, real0, p->numel()));
        real += p->numel();
        real0 += p->numel();
      }
      // The buffers after the rows of the parameters, as ddp_sim's tables show them.
      const report::NamedTensors sim_buffers = report::buffer_values(sim.replicas[static_cast<size_t>(r)]->model);
      const report::NamedTensors& real_buffers = buffers[static_cast<size_t>(r)];
      for (size_t i = 0; i < sim_buffers.names.size(); ++i) {
        const auto& s = sim_buffers.values[i];
        const auto n = static_cast<int64_t>(s.size());
        sim_rows.push_back(cmp(sim_buffers.names[i], s.data(), real_buffers.values[i].data(), n));
        buffer_rows.push_back(cmp(sim_buffers.names[i], real_buffers.values[i].data(), buffers[0].values[i].data(), n));
      }
      if (!report_path.empty() && (r == 0 || r + 1 == env.world_size)) {
        std::vector<report::Row> rows;
        const float* rp = everyone.data() + static_cast<size_t>(r) * flat.size();
        for (const Parameter* p : ps) {
          rows.push_back(report::cmp_row(p->name, p->data(), rp, p->numel()));
          rp += p->numel();
        }
        for (size_t i = 0; i < sim_buffers.names.size(); ++i) {
          rows.push_back(report::cmp_row(sim_buffers.names[i], sim_buffers.values[i].data(),
                                         real_buffers.values[i].data(),
                                         static_cast<int64_t>(sim_buffers.values[i].size())));
        }
        page.tables.push_back({fmt::format("sim vs real, rank {} (simulator all-reduce: {})", r,
                                           collective::algorithm_name(cfg.allreduce)),
                               std::move(rows)});
      }
      if (!report_path.empty() && r > 0 && r + 1 == env.world_size) {
        std::vector<report::Row> rows;
        const float* rp = everyone.data() + static_cast<size_t>(r) * flat.size();
        const float* r0 = everyone.data();
        for (const Parameter* p : ps) {
          rows.push_back(report::cmp_row(p->name, rp, r0, p->numel()));
          rp += p->numel();
          r0 += p->numel();
        }
        for (size_t i = 0; i < real_buffers.names.size(); ++i) {
          rows.push_back(report::cmp_row(real_buffers.names[i], real_buffers.values[i].data(),
                                         buffers[0].values[i].data(),
                                         static_cast<int64_t>(real_buffers.values[i].size())));
        }
        page.tables.push_back({fmt::format("real rank {} vs real rank 0", r), std::move(rows)});
      }
      for (const auto& row : sim_rows) ok = ok && row.approximate;
      for (const auto& row : rank_rows) ok = ok && (row.exact || !by_design.empty());
      // Buffers may differ between ranks (broadcast_buffers false, or a last training forward after the
      // broadcast): DDP's semantics, checked against the simulator's rows above, not a failure.
      for (const auto& row : buffer_rows) buffers_equal = buffers_equal && row.exact;
      if (r == 0 || r + 1 == env.world_size) {
        report += fmt::format("\n# sim vs real, rank {} (simulator all-reduce: {}{})\n", r,
                              collective::algorithm_name(cfg.allreduce),
                              backend != "nccl" ? ", the order of Gloo's ring"
                              : cfg.allreduce == collective::Algorithm::nccl_ring
                                  ? "; NCCL pinned by --nccl-exact adds in this order"
                                  : "; NCCL picks its own algorithm and order: --nccl-exact pins it to nccl-ring");
        for (const auto& row : sim_rows) report += format_cmp(row) + "\n";
      }
      if (r > 0 && r + 1 == env.world_size) {
        report += fmt::format("\n# real rank {} vs real rank 0\n", r);
        for (const auto& row : rank_rows) report += format_cmp(row) + "\n";
        for (const auto& row : buffer_rows) report += format_cmp(row) + "\n";
      }
    }
    if (!buffers[0].names.empty() && env.world_size > 1) {  // the sentence ddp_sim's tables end with
      report += buffers_equal ? "every rank's buffers equal rank 0's: " + buffers_why(cfg, true)
                              : "ranks differ from rank 0 in their buffers only: " + buffers_why(cfg, false);
    }
    if (!test_correct.empty()) {
      report +=
          fmt::format("\n# test accuracy on the {} held-out digits (model.eval(): running statistics, no dropout)\n",
                      sim.test_size);
      const auto pct = [&](int64_t c) { return 100.0 * static_cast<double>(c) / static_cast<double>(sim.test_size); };
      for (size_t r = 0; r < test_correct.size(); ++r) {
        const int64_t s = sim.test_correct[r];
        report += fmt::format("rank {}: {}/{} ({:.2f}%) | simulator: {}/{} ({:.2f}%)\n", r, test_correct[r],
                              sim.test_size, pct(test_correct[r]), s, sim.test_size, pct(s));
      }
    }
    if (cfg.zero) {  // the real ranks' shards and state, and whether the simulator's ranks hold the same
      const auto& zero = dynamic_cast<const ddp::ZeroRedundancyOptimizer&>(*mine.replica->optimizer);
      report += "\n" + ddp::zero_block(zero.params(), zero.partition(), state_numel);
      std::vector<int64_t> sim_state;
      for (const auto& rep : sim.replicas) sim_state.push_back(rep->optimizer->state_numel());
      report += fmt::format("the simulator's ranks hold the same state per rank: {}\n", sim_state == state_numel);
      ok = ok && sim_state == state_numel;
    }
    const char* params_only = buffers_equal ? "" : "'s parameters";
    report += !ok ? "\nNOT verified: a row above is not approximately equal, or ranks differ\n"
              : by_design.empty()
                  ? fmt::format("\nverified: every rank{} bitwise identical; the simulator agrees (see exact above)\n",
                                params_only)
                  : fmt::format("\nverified: the ranks differ, as DDP's semantics make them ({}); each real rank "
                                "agrees with its simulated rank (see exact above)\n",
                                by_design);
    if (!mine.hook_reports.empty()) report += "\n" + ddp::format_hook_reports(cfg.comm_hook.name, mine.hook_reports);
    fmt::print("{}", report);
    verdict = ok ? 0.0f : 1.0f;
    if (!report_path.empty()) {
      page.program = "ddp_verify";
      page.title = fmt::format("{} real ranks over {} ({}), checked against the simulator", env.world_size, backend,
                               on_gpu ? "model on the GPU" : "CPU");
      page.argv = argv;
      page.config = ddp::describe(cfg);
      for (size_t r = 0; r < losses.size(); ++r) {
        page.losses.push_back(report::loss_series(fmt::format("rank {}", r), losses[r]));
      }
      page.notes.push_back(report);
      if (auto t = report::buffers_table(cfg, "", buffers)) page.buffers.push_back(std::move(*t));
      if (auto t = report::masks_table(cfg, "", masks)) page.masks.push_back(std::move(*t));
      const Module& model0 = sim.replicas[0]->model;
      page.layouts.push_back(report::first_layout(model0));
      page.layouts.push_back(report::layout_of(
          fmt::format("from iteration 1: rebuilt in gradient-ready order (first bucket 1 MiB, then up to "
                      "--bucket-cap-mb {})",
                      cfg.bucket_cap_mb),
          *sim.replicas[0]->reducer, model0));
      page.timing = report::timing_of(build_timeline(cfg, CostModel{}), cfg.world_size);
      page.timing->summary += "(ddp_sim's default cost model: --link-latency-us 5 --link-gbps 10 --compute-gflops 50)\n";
      if (std::string why = write_file_atomic(report_path, report::render_html(page)); !why.empty()) {
        std::fprintf(stderr, "ddp_verify: --report: %s\n", why.c_str());
        verdict = 1.0f;
      }
    }
    const std::string dump = flags.get_string("dump-params", "");
    if (!dump.empty()) {
      const std::string out = dump_json(DumpPieces{env.world_size, backend, args, params_json, indices_json,
                                                   losses_json, buffers_json, test_correct});
      if (std::string why = write_file_atomic(dump, out); !why.empty()) {
        std::fprintf(stderr, "ddp_verify: --dump-params: %s\n", why.c_str());
        verdict = 1.0f;
      }
    }
  }
  comm->broadcast(&verdict, 1, 0);  // every rank exits with rank 0's verdict
  return verdict == 0.0f ? 0 : 1;
}

int run(int argc, char** argv) {
  auto known = ddp::config_flag_names();
  for (const auto& f : dist::runner_flag_names()) known.insert(f);
  for (const char* f : {"dump-params", "quiet", "threads", "report", "compute"}) known.insert(f);
  const Flags flags(argc, argv, known, dist::with_runner_bare_flags({"quiet", "seed-per-rank"}));
  if (flags.help()) {
    std::printf("%s%s%s%s%s%s", head().c_str(), ddp::config_usage(), dist::runner_usage().c_str(), kCompute,
                threads_usage(), kTail);
    return 0;
  }
  if (!flags.positional().empty()) throw UsageError("unexpected argument '" + flags.positional()[0] + "' (see --help)");
  ddp::Config cfg = ddp::config_from_flags(flags);
  for (const char* f : {"dump-params", "report"}) {
    if (flags.has(f)) {
      if (std::string why = check_writable(flags.get_string(f, "")); !why.empty()) {
        throw UsageError(fmt::format("--{}: {}", f, why));
      }
    }
  }
  threads_from_flags(flags);  // rank 0's simulator reads it: checked here, before any rank starts
  const dist::RunFlags run = dist::read_run_flags(flags, dist::Backends::real, cfg.world_size);  // --world-size: cfg's
  const std::string why_not = dist::backend_refusal(cfg, run.backend, dist::compute_from_flags(flags, run.backend));
  if (!why_not.empty()) throw UsageError(why_not);
  if (run.nccl_exact) {  // NCCL pinned to one ring: the simulator adds in that order
    if (flags.has("allreduce") && cfg.allreduce != collective::Algorithm::nccl_ring) {
      throw UsageError(fmt::format("--nccl-exact compares with the simulator's --allreduce nccl-ring (got {})",
                                   collective::algorithm_name(cfg.allreduce)));
    }
    cfg.allreduce = collective::Algorithm::nccl_ring;
  }
  std::optional<TextData> text;  // --model gpt: its data, read once before the ranks start
  if (cfg.is_gpt()) {
    if (flags.has("report")) throw UsageError("--report does not apply to --model gpt (the sequential models' output)");
    text.emplace(TextData::load(cfg.data));
    text->check_batch_shape(cfg.batch_size, cfg.gpt.block_size);
    cfg.gpt.vocab_size = text->vocab_size();
  }
  return dist::run_ddp_ranks(flags, run, argc, argv, cfg, [&](dist::Rank& rank, const ddp::Config& ranks_cfg) {
    return text ? gpt_body(flags, ranks_cfg, *text, rank)
                : body(flags, ranks_cfg, rank, std::vector<std::string>(argv, argv + argc));
  });
}

}  // namespace

int main(int argc, char** argv) { return ddplab::guarded_main("ddp_verify", argc, argv, run); }
