// What each rank's DataLoaders really yielded (rank{r}/data.json: the recorder reads the samplers' indices,
// mapped through Subset and random_split down to the base dataset, one list per iteration of a loader), and
// what ddp_check says of it: a line per epoch and rank (seen, distinct, shared with other ranks, order
// changed), and the data findings. Indices, not sample contents: a dataset with repeated samples neither
// hides nor fakes an overlap. Where no loader's indices were recorded (an IterableDataset, batches made by
// hand) the caller falls back to the per-sample fingerprints of the inputs.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "src/check/trace/trace.h"

namespace ddplab::check {

class Findings;

struct LoaderEpoch {
  int64_t iteration = 0;   // the k-th iter() of this loader on this rank
  int64_t epoch = -1;      // DistributedSampler.epoch at iter() (-1: not a DistributedSampler)
  bool has_indices = false;
  std::vector<int64_t> indices;  // base-dataset indices in the order yielded
  bool training = false;         // a grad-enabled DDP forward consumed its batches
  int64_t first_step = -1, last_step = -1;
};

struct Loader {
  int64_t id = 0;
  std::string dataset, base, subset_digest, sampler;
  bool shuffle = false;  // the sampler reshuffles (DistributedSampler(shuffle=True), RandomSampler)
  std::vector<LoaderEpoch> epochs;
};

struct RankData {
  bool present = false;  // rank{r}/data.json exists (older recorders wrote none)
  bool truncated = false;
  std::vector<Loader> loaders;
};

// rank's data.json; present=false when there is none. Throws TraceError on a malformed one.
RankData read_data(const std::string& dir, int rank, int64_t max_indices = 50'000'000);

struct EpochLine {
  int rank = 0;
  int64_t loader = 0, iteration = 0, first_step = -1;
  int64_t seen = 0, distinct = 0, shared = 0;
  int order_changed = -1;  // -1: the loader's first iteration; 0 the same order as the last; 1 changed
};

// One rank's epoch of a training loader drawn over the base dataset's indices (the --report data map).
struct DataMapRow {
  int rank = 0;
  int64_t loader = 0, iteration = 0;
  int64_t base_len = 0;  // the base dataset's length ("TensorDataset/686"), else the largest index + 1
  // At most kMapCells characters; cell c covers indices [c*base_len/n, (c+1)*base_len/n): '.' none trained on
  // by this rank, 'o' this rank only, 'r' one this rank was yielded twice in the epoch, 'S' one another rank
  // also trained on in the epoch (S wins over r, r over o).
  std::string cells;
};
constexpr int64_t kMapCells = 240;

struct DataSummary {
  std::string source = "none";  // "sampler" (indices), "fingerprints", or "none"
  std::vector<EpochLine> epochs;  // training iterations, per loader, iteration and rank
  std::vector<DataMapRow> map;    // the same rows, drawn
  std::string verdict;            // one sentence: each rank saw its own data, or what was shared
};

// The data findings from the recorded indices. false (nothing added) when no rank recorded the indices of
// a training loader.
bool data_findings(const Run& run, const std::vector<RankData>& data, Findings* found, DataSummary* out);

}  // namespace ddplab::check
