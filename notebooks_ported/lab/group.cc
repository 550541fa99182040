#include "notebooks_ported/lab/group.h"

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <stdexcept>

#include <fmt/format.h>

#include "notebooks_ported/lab/lab.h"
#include "notebooks_ported/lab/lab_report.h"
#include "src/ddp/rank_sync.h"
#include "src/base/errors.h"
#include "src/launch/runner.h"
#include "src/model/norm.h"

namespace ddplab::lab {

namespace {

// RankState on the wire: sizes as uint64, then the raw bytes. Every rank runs the same program, so the
// layout is shared; the reader still checks every length against what is left (a peer's bytes).
class Writer {
 public:
  void u64(uint64_t v) { raw(&v, sizeof v); }
  void i64(int64_t v) { raw(&v, sizeof v); }
  void floats(const std::vector<float>& v) {
    u64(v.size());
    raw(v.data(), v.size() * sizeof(float));
  }
  void str(const std::string& s) {
    u64(s.size());
    raw(s.data(), s.size());
  }
  std::string out;

 private:
  void raw(const void* p, size_t n) { out.append(static_cast<const char*>(p), n); }
};

class Reader {
 public:
  explicit Reader(const std::string& s) : s_(s) {}
  uint64_t u64() {
    uint64_t v;
    raw(&v, sizeof v);
    return v;
  }
  int64_t i64() {
    int64_t v;
    raw(&v, sizeof v);
    return v;
  }
  std::vector<float> floats() {
    const uint64_t n = u64();
    if (n > (s_.size() - at_) / sizeof(float)) throw comm::CommError("a rank's state is cut short");
    std::vector<float> v(n);
    raw(v.data(), n * sizeof(float));
    return v;
  }
  std::string str() {
    const uint64_t n = u64();
    if (n > s_.size() - at_) throw comm::CommError("a rank's state is cut short");
    std::string v = s_.substr(at_, n);
    at_ += n;
    return v;
  }

 private:
  void raw(void* p, size_t n) {
    if (n > s_.size() - at_) throw comm::CommError("a rank's state is cut short");
    std::memcpy(p, s_.data() + at_, n);
    at_ += n;
  }
  const std::string& s_;
  size_t at_ = 0;
};

std::string encode(const RankState& s) {
  Writer w;
  w.u64(s.names.size());
  for (size_t i = 0; i < s.names.size(); ++i) {
    w.str(s.names[i]);
    w.floats(s.values[i]);
  }
  w.u64(s.num_params);
  w.floats(s.losses);
  w.floats(s.clip_norms);
  w.floats(s.mask);
  w.i64(s.test_correct);
  w.i64(s.optimizer_state_numel);
  return w.out;
}

RankState decode(const std::string& bytes) {
  Reader r(bytes);
  RankState s;
  const uint64_t n = r.u64();
  if (n > bytes.size()) throw comm::CommError("a rank's state is cut short");
  for (uint64_t i = 0; i < n; ++i) {
    s.names.push_back(r.str());
    s.values.push_back(r.floats());
  }
  s.num_params = r.u64();
  if (s.num_params > n) throw comm::CommError("a rank's state names more parameters than tensors");
  s.losses = r.floats();
  s.clip_norms = r.floats();
  s.mask = r.floats();
  s.test_correct = r.i64();
  s.optimizer_state_numel = r.i64();
  return s;
}

template <typename P>
void add_parameters(RankState& s, const std::vector<P*>& params) {
  for (const Parameter* p : params) {
    s.names.push_back(p->name);
    s.values.emplace_back(p->data(), p->data() + p->numel());
  }
  s.num_params = s.names.size();
}

}  // namespace

RankState state_of(const ddp::Replica& rep, const std::vector<ddp::BatchLog>& log, int64_t rank, int64_t test_correct) {
  RankState s;
  add_parameters(s, rep.model.parameters());
  for (const Buffer* b : rep.model.buffers()) {
    s.names.push_back(b->name);
    if (b->is_int64) {  // num_batches_tracked: a count, compared as one float (as cmp_models does)
      s.values.push_back({static_cast<float>(b->count)});
    } else {
      s.values.emplace_back(b->value.data(), b->value.data() + b->value.size());
    }
  }
  for (const ddp::BatchLog& l : log) {
    if (l.rank == rank) s.losses.push_back(l.loss);
  }
  s.clip_norms = rep.clip_norms;
  for (size_t i = 0; i < rep.model.size(); ++i) {
    if (const auto* d = dynamic_cast<const Dropout*>(&rep.model[i])) s.mask = d->last_mask();
  }
  s.test_correct = test_correct;
  s.optimizer_state_numel = rep.optimizer ? rep.optimizer->state_numel() : 0;
  return s;
}

RankState state_of(const gpt::GptRank& rank) {
  RankState s;
  add_parameters(s, rank.params);
  s.losses = rank.log.losses;
  s.clip_norms = rank.clip_norms;
  s.optimizer_state_numel = rank.optimizer ? rank.optimizer->state_numel() : 0;
  return s;
}

std::vector<CmpResult> cmp_states(const RankState& a, const RankState& b) {
  if (a.names != b.names) throw std::logic_error("cmp_states: two different models");
  std::vector<CmpResult> rows;
  for (size_t i = 0; i < a.names.size(); ++i) {
    rows.push_back(cmp(a.names[i], a.values[i].data(), b.values[i].data(), static_cast<int64_t>(a.values[i].size())));
  }
  return rows;
}

std::vector<float> parameter_values(const RankState& s) {
  std::vector<float> v;
  for (size_t i = 0; i < s.num_params; ++i) v.insert(v.end(), s.values[i].begin(), s.values[i].end());
  return v;
}

ddp::Config group_config(const Flags& flags, const dist::RunFlags& run, ddp::Config cfg) {
  if (run.nccl_exact) cfg.allreduce = collective::Algorithm::nccl_ring;
  int64_t ws = run.nproc;
  if (run.real()) {
    if (ws != 0) check_range("nproc", ws, 2, 8);
  } else {
    ws = flags.get_int("world-size", 2, 2, 8);
  }
  if (ws != 0) cfg.world_size = ws;
  ddp::validate(cfg);
  return cfg;
}

std::string Group::describe(int64_t world_size) const {
  if (!comm_) return fmt::format("{} simulated ranks (one process)", world_size);
  return fmt::format("{} real {} ranks (one process each)", world_size, comm_->backend());
}

std::string Group::simulated_note(int64_t world_size) const {
  if (runs(world_size)) return "";
  return fmt::format("  (simulated in this process: this part runs at world size {}, the group has {} real ranks; "
                     "--nproc {} runs it for real)",
                     world_size, comm_->world_size(), world_size);
}

void Group::say(const std::string& text) const {
  if (rank() != 0) return;
  size_t start = 0;
  for (size_t nl; (nl = text.find('\n', start)) != std::string::npos; start = nl + 1) {
    print_line(text.substr(start, nl - start));
  }
  if (start < text.size()) print_line(text.substr(start));
}

std::vector<std::string> Group::gather(const std::string& mine) const {
  if (!comm_) return {mine};
  return comm::all_gather_strings(*comm_, mine);
}

std::vector<RankState> Group::gather(const RankState& mine) const {
  std::vector<RankState> all;
  for (const std::string& s : gather(encode(mine))) all.push_back(decode(s));
  return all;
}

std::vector<std::string> Group::each_rank(int64_t world_size,
                                          const std::function<std::string(int64_t rank)>& fn) const {
  if (comm_) return gather(fn(comm_->rank()));
  std::vector<std::string> out;
  for (int64_t r = 0; r < world_size; ++r) out.push_back(fn(r));
  return out;
}

gpt::GptRank& TrainedGpt::rank(int64_t r) {
  if (simulated) return *sim.ranks.at(static_cast<size_t>(r));
  if (r != mine->rank) throw std::logic_error("a real rank holds only its own GptRank");
  return *mine;
}

std::unique_ptr<Trained> train(const Group& g, const ddp::Config& cfg, bool single_device) {
  auto t = std::make_unique<Trained>();
  t->cfg = cfg;
  if (!g.real() || !g.runs(cfg.world_size)) {
    t->sim = ddp::simulate(t->cfg, single_device);
    t->test_size = t->sim.test_size;
    if (single_device) t->single_device_test_correct = t->sim.single_device_test_correct;
    for (size_t r = 0; r < t->sim.replicas.size(); ++r) {
      const int64_t correct = r < t->sim.test_correct.size() ? t->sim.test_correct[r] : -1;
      t->ranks.push_back(state_of(*t->sim.replicas[r], t->sim.log, static_cast<int64_t>(r), correct));
    }
    return t;
  }
  t->simulated = false;
  t->mine = ddp::train_rank(t->cfg, *g.comm());
  t->ranks = g.gather(state_of(*t->mine.replica, t->mine.log, g.rank(), t->mine.test_correct));
  t->test_size = t->mine.test_size;
  if (single_device && g.rank() == 0) {
    t->single_device_test_correct = ddp::simulate(t->cfg, true).single_device_test_correct;
  }
  return t;
}

std::unique_ptr<TrainedGpt> train_gpt(const Group& g, const gpt::RunConfig& cfg, const TextData& data) {
  auto t = std::make_unique<TrainedGpt>();
  t->cfg = cfg;
  const auto count = [&t](size_t buckets) {
    ++t->allreduces;
    t->buckets_reduced += static_cast<int64_t>(buckets);
  };
  if (!g.real() || !g.runs(cfg.world_size)) {
    ddp::SimHooks hooks;
    hooks.on_allreduce = count;
    t->sim = gpt::simulate(t->cfg, data, hooks);
    for (const auto& rk : t->sim.ranks) t->ranks.push_back(state_of(*rk));
    return t;
  }
  // ddp_verify --model gpt's rank: the seed and the model, DDP(model), AdamW, the one training loop.
  t->simulated = false;
  comm::Communicator& comm = *g.comm();
  t->mine = std::make_unique<gpt::GptRank>(t->cfg, data, g.rank());
  double seconds = 0;
  t->log = ddp::train_over(t->cfg, comm, *t->mine, false, &seconds, count);
  t->ranks = g.gather(state_of(*t->mine));
  return t;
}

int run_group_lab(int argc, char** argv, const std::vector<const char*>& own, const char* usage,
                  const std::function<ddp::Config(const Flags&)>& config,
                  const std::function<int(Group&, const ddp::Config&, LabReport&)>& body) {
  auto known = lab_flag_names(false);
  for (const char* f : own) known.insert(f);
  const Flags flags(argc, argv, known, dist::with_runner_bare_flags());
  if (flags.help()) {
    std::printf("%s%s", usage, lab_usage(false).c_str());
    return 0;
  }
  if (!flags.positional().empty()) throw UsageError("unexpected argument '" + flags.positional()[0] + "' (see --help)");
  const dist::RunFlags run = lab_run_flags(flags);
  const ddp::Config cfg = group_config(flags, run, config(flags));
  LabReport page(flags, run, argc, argv);  // --report: refused on real ranks; its path checked now
  int status = 0;
  if (!run.real()) {
    Group g;
    status = body(g, cfg, page);
  } else {
    status = dist::run_ranks(
        flags, run, argc, argv,
        [&](int world_size) {
          check_range("world size", world_size, 2, 8);
          return ddp::to_args(dist::ddp_config_for(cfg, world_size));
        },
        [&](dist::Rank& r) {
          Group g(*r.comm);
          return body(g, dist::ddp_config_for(cfg, r.comm->world_size()), page);
        });
  }
  return std::max(status, page.write());
}

}  // namespace ddplab::lab
