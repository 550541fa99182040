#include "src/check/findings/data.h"

#include <sys/stat.h>

#include <algorithm>
#include <cstdlib>
#include <fstream>
#include <map>
#include <set>
#include <sstream>

#include <fmt/format.h>

#include "src/check/findings/findings.h"
#include "src/base/flags.h"

namespace ddplab::check {
namespace {

using nlohmann::json;

[[noreturn]] void fail(const std::string& path, const std::string& what) {
  throw TraceError(escape_control(path + ": " + what));
}

int64_t opt_int(const json& j, const char* key, int64_t def) {
  return j.contains(key) && j.at(key).is_number_integer() ? j.at(key).get<int64_t>() : def;
}

std::string opt_str(const json& j, const char* key) {
  return j.contains(key) && j.at(key).is_string() ? j.at(key).get<std::string>() : "";
}

struct Key {
  int64_t loader, iteration;
  bool operator<(const Key& o) const { return std::tie(loader, iteration) < std::tie(o.loader, o.iteration); }
};

DataMapRow map_row(int rank, const Key& key, const std::string& base, const LoaderEpoch& e,
                   const std::map<int64_t, int>& owners) {
  DataMapRow row;
  row.rank = rank;
  row.loader = key.loader;
  row.iteration = key.iteration;
  const size_t slash = base.rfind('/');
  if (slash != std::string::npos) row.base_len = std::atoll(base.c_str() + slash + 1);
  for (int64_t i : e.indices) row.base_len = std::max(row.base_len, i + 1);
  const int64_t n = std::min<int64_t>(kMapCells, std::max<int64_t>(row.base_len, 1));
  row.cells.assign(static_cast<size_t>(n), '.');
  std::map<int64_t, int> times;
  for (int64_t i : e.indices) ++times[i];
  const auto rank_of = [](char c) { return c == 'S' ? 3 : c == 'r' ? 2 : c == 'o' ? 1 : 0; };
  for (const auto& [i, t] : times) {
    char& cell = row.cells[static_cast<size_t>(i * n / row.base_len)];
    auto it = owners.find(i);
    const char mark = it != owners.end() && it->second > 1 ? 'S' : t > 1 ? 'r' : 'o';
    if (rank_of(mark) > rank_of(cell)) cell = mark;
  }
  return row;
}

}  // namespace

RankData read_data(const std::string& dir, int rank, int64_t max_indices) {
  RankData d;
  const std::string path = fmt::format("{}/rank{}/data.json", dir, rank);
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) return d;
  if (!S_ISREG(st.st_mode)) fail(path, "is not a regular file");
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  json j;
  try {
    j = json::parse(ss.str());
  } catch (const json::exception& e) {
    fail(path, std::string("not valid JSON (") + e.what() + ")");
  }
  if (!j.is_object() || !j.contains("loaders") || !j.at("loaders").is_array()) fail(path, "has no \"loaders\" list");
  d.present = true;
  d.truncated = j.value("truncated", false) == true;
  int64_t total = 0;
  for (const json& l : j.at("loaders")) {
    if (!l.is_object()) fail(path, "a loader is not an object");
    Loader ld;
    ld.id = opt_int(l, "id", static_cast<int64_t>(d.loaders.size()));
    ld.dataset = opt_str(l, "dataset");
    ld.base = opt_str(l, "base");
    ld.subset_digest = opt_str(l, "subset_digest");
    if (l.contains("sampler") && l.at("sampler").is_object()) {
      const json& s = l.at("sampler");
      ld.sampler = opt_str(s, "type");
      ld.shuffle = ld.sampler == "RandomSampler" || (ld.sampler == "DistributedSampler" && s.value("shuffle", true) == true);
    }
    if (l.contains("epochs") && l.at("epochs").is_array()) {
      for (const json& e : l.at("epochs")) {
        if (!e.is_object()) fail(path, "a loader epoch is not an object");
        LoaderEpoch ep;
        ep.iteration = opt_int(e, "iteration", static_cast<int64_t>(ld.epochs.size()));
        ep.epoch = opt_int(e, "epoch", -1);
        ep.training = e.value("training", false) == true;
        ep.first_step = opt_int(e, "first_step", -1);
        ep.last_step = opt_int(e, "last_step", -1);
        if (e.contains("indices") && e.at("indices").is_array()) {
          ep.has_indices = true;
          total += static_cast<int64_t>(e.at("indices").size());
          if (total > max_indices) fail(path, fmt::format("holds over {} sample indices, the limit", max_indices));
          ep.indices.reserve(e.at("indices").size());
          for (const json& x : e.at("indices")) {
            if (!x.is_number_integer() || x.get<int64_t>() < 0) fail(path, "a sample index is not a non-negative integer");
            ep.indices.push_back(x.get<int64_t>());
          }
        }
        ld.epochs.push_back(std::move(ep));
      }
    }
    d.loaders.push_back(std::move(ld));
  }
  return d;
}

bool data_findings(const Run& run, const std::vector<RankData>& data, Findings* found, DataSummary* out) {
  const int ws = run.world_size();
  // Training iterations by (loader id, iteration), per rank; loaders that never trained are validation's.
  std::map<Key, std::vector<const LoaderEpoch*>> train;
  std::map<Key, const Loader*> loader_of;
  std::set<int64_t> training_loaders;
  for (int r = 0; r < ws; ++r)
    for (const Loader& l : data[static_cast<size_t>(r)].loaders)
      for (const LoaderEpoch& e : l.epochs)
        if (e.training && e.has_indices) training_loaders.insert(l.id);
  if (training_loaders.empty()) return false;
  out->source = "sampler";
  std::map<std::string, std::set<std::string>> digests;  // base -> the ranks' subset digests (training loaders)
  std::map<std::string, std::set<int64_t>> trained;      // base -> every index some rank trained on
  for (int r = 0; r < ws; ++r)
    for (const Loader& l : data[static_cast<size_t>(r)].loaders) {
      if (!training_loaders.count(l.id)) continue;
      digests[l.base].insert(l.subset_digest);
      // Epochs are the iterations that trained: a peek at the loader (`next(iter(loader))`), an evaluation pass
      // or a warm-up loop over it is none, and is left out of the numbering too.
      int64_t epoch = 0;
      for (const LoaderEpoch& e : l.epochs) {
        if (!e.has_indices || !e.training) continue;
        auto& v = train[{l.id, epoch}];
        v.resize(static_cast<size_t>(ws), nullptr);
        v[static_cast<size_t>(r)] = &e;
        loader_of[{l.id, epoch}] = &l;
        trained[l.base].insert(e.indices.begin(), e.indices.end());
        ++epoch;
      }
    }
  const auto split_differs = [&](const std::string& base) { return digests[base].size() > 1; };

  int64_t max_shared = 0;
  bool same_everywhere = false;
  std::map<std::pair<int, int64_t>, const LoaderEpoch*> last;  // (rank, loader) -> its previous iteration
  for (const auto& [key, eps] : train) {
    std::vector<std::set<int64_t>> sets(static_cast<size_t>(ws));
    std::map<int64_t, int> owners;
    for (int r = 0; r < ws; ++r)
      if (const LoaderEpoch* e = eps[static_cast<size_t>(r)]) {
        sets[static_cast<size_t>(r)] = std::set<int64_t>(e->indices.begin(), e->indices.end());
        for (int64_t i : sets[static_cast<size_t>(r)]) ++owners[i];
      }
    int64_t shared = 0, first_step = -1, present = 0;
    int ref = -1;
    for (int r = 0; r < ws && ref < 0; ++r)
      if (eps[static_cast<size_t>(r)]) ref = r;
    for (const auto& [i, n] : owners) shared += n > 1;
    bool all_same = true;
    for (int r = 0; r < ws; ++r) {
      const LoaderEpoch* e = eps[static_cast<size_t>(r)];
      if (!e) continue;
      ++present;
      if (first_step < 0 || (e->first_step >= 0 && e->first_step < first_step)) first_step = e->first_step;
      all_same = all_same && sets[static_cast<size_t>(r)] == sets[static_cast<size_t>(ref)];
      EpochLine line;
      line.rank = r;
      line.loader = key.loader;
      line.iteration = key.iteration;
      line.first_step = e->first_step;
      line.seen = static_cast<int64_t>(e->indices.size());
      line.distinct = static_cast<int64_t>(sets[static_cast<size_t>(r)].size());
      for (int64_t i : sets[static_cast<size_t>(r)]) line.shared += owners[i] > 1;
      auto prev = last.find({r, key.loader});
      if (prev != last.end()) {
        // A partial epoch (the script stopped early) is compared with the same number of the last one's.
        const auto& a = prev->second->indices;
        const size_t n = std::min(a.size(), e->indices.size());
        line.order_changed = !std::equal(a.begin(), a.begin() + static_cast<std::ptrdiff_t>(n), e->indices.begin());
        if (!line.order_changed && loader_of[key]->shuffle && n >= 2)
          found->add("same-order-every-epoch", "problem", "", e->first_step, r, "",
                     fmt::format("step {}: rank {} iterated its {} samples in the same order as in its previous epoch: "
                                 "DistributedSampler(shuffle=True) without sampler.set_epoch(epoch) at the start of each "
                                 "epoch shuffles every epoch alike",
                                 e->first_step, r, e->indices.size()));
      }
      last[{r, key.loader}] = e;
      out->epochs.push_back(line);
      out->map.push_back(map_row(r, key, loader_of[key]->base, *e, owners));
    }
    max_shared = std::max(max_shared, shared);
    if (ws < 2 || present < 2) continue;
    const std::string& base = loader_of[key]->base;
    if (all_same && present == ws && !owners.empty()) {
      same_everywhere = true;
      found->add("same-data-on-all-ranks", "problem", "", first_step, -1, "",
                 fmt::format("step {}: every rank iterated over the very same {} samples in its epoch {} (from the "
                             "sampler's indices): the all-reduce then averages {} gradients of the same data. {}",
                             first_step, owners.size(), key.iteration, ws, sampler_advice(run)));
    } else if (shared > ws - 1) {  // DistributedSampler pads an epoch with at most world_size - 1 repeats
      const bool split = split_differs(base);
      found->add("overlapping-data", "problem", split ? "random-split-per-rank" : "sampler", first_step, -1, "",
                 split ? fmt::format("step {}: {} samples of {} were trained on by more than one rank in epoch {}: each "
                                     "rank split the dataset on its own (random_split or a permutation with no shared "
                                     "generator; torch seeds every process differently), so the ranks' training sets "
                                     "differ and overlap{}. Split once with a fixed "
                                     "generator (random_split(ds, lengths, generator=torch.Generator().manual_seed(0))) "
                                     "on every rank",
                                     first_step, shared, base, key.iteration,
                                     loader_of[key]->sampler == "DistributedSampler"
                                         ? " (a DistributedSampler over each rank's own split cannot keep them apart)"
                                         : "")
                       : fmt::format("step {}: {} samples of {} were trained on by more than one rank in epoch {} (the "
                                     "samplers' indices; a DistributedSampler pads with at most {}): the ranks' shards "
                                     "overlap. Usually a sampler seeded differently per rank (DistributedSampler(seed="
                                     "rank)) or shards cut by hand. {}",
                                     first_step, shared, base, key.iteration, ws - 1, sampler_advice(run)));
    }
  }
  // Validation loaders over a split whose samples some rank trained on.
  for (int r = 0; r < ws; ++r)
    for (const Loader& l : data[static_cast<size_t>(r)].loaders) {
      if (training_loaders.count(l.id) || l.subset_digest.empty() || !trained.count(l.base)) continue;
      std::set<int64_t> leaked;
      for (const LoaderEpoch& e : l.epochs)
        for (int64_t i : e.indices)
          if (trained[l.base].count(i)) leaked.insert(i);
      if (leaked.empty()) continue;
      found->add("validation-overlaps-training", "problem", split_differs(l.base) ? "random-split-per-rank" : "", -1, r,
                 "",
                 fmt::format("rank {}'s evaluation loader (loader {}, {}) yielded {} samples that some rank trained on: "
                             "{}the validation score is measured partly on training data",
                             r, l.id, l.dataset, leaked.size(),
                             split_differs(l.base) ? "the ranks split the dataset differently (random_split with no "
                                                     "shared generator), so one rank's validation samples are another's "
                                                     "training samples; "
                                                   : ""));
    }
  if (same_everywhere) {
    out->verdict = "every rank trained on the same samples (see same-data-on-all-ranks)";
  } else if (max_shared == 0) {
    out->verdict = "each rank trained on its own samples in every epoch: no sample index shared between ranks";
  } else if (max_shared <= ws - 1) {
    out->verdict = fmt::format("each rank trained on its own samples; at most {} shared per epoch, DistributedSampler's "
                               "padding (it repeats samples to give every rank as many)",
                               max_shared);
  } else {
    out->verdict = fmt::format("ranks shared up to {} samples within an epoch (see overlapping-data)", max_shared);
  }
  return true;
}

}  // namespace ddplab::check
