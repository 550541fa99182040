#include "src/data/data.h"

#include <zlib.h>

#include <cmath>
#include <cstdlib>
#include <numeric>
#include <sstream>
#include <stdexcept>

#include <fmt/format.h>

#include "src/base/flags.h"

namespace ddplab {

Matrix Dataset::gather_x(const std::vector<int64_t>& indices) const {
  Matrix out(static_cast<Eigen::Index>(indices.size()), x.cols());
  for (size_t i = 0; i < indices.size(); ++i) out.row(static_cast<Eigen::Index>(i)) = x.row(indices[i]);
  return out;
}

Matrix Dataset::gather_y(const std::vector<int64_t>& indices) const {
  Matrix out(static_cast<Eigen::Index>(indices.size()), y.cols());
  for (size_t i = 0; i < indices.size(); ++i) out.row(static_cast<Eigen::Index>(i)) = y.row(indices[i]);
  return out;
}

std::vector<int64_t> Dataset::gather_labels(const std::vector<int64_t>& indices) const {
  std::vector<int64_t> out;
  out.reserve(indices.size());
  for (int64_t i : indices) out.push_back(labels.at(static_cast<size_t>(i)));
  return out;
}

Dataset random_tensor_dataset(int64_t num_samples, int64_t in_shape, int64_t out_shape, uint64_t seed, Generator& g) {
  g.manual_seed(seed);
  Dataset d;
  d.x.resize(num_samples, in_shape);
  d.y.resize(num_samples, out_shape);
  for (int64_t i = 0; i < num_samples; ++i) {  // x then y, sample by sample: the draws interleave
    g.normal_(d.x.row(i).data(), in_shape);
    g.normal_(d.y.row(i).data(), out_shape);
  }
  return d;
}

const char* const kDigitsDefaultPath = "/usr/lib/python3/dist-packages/sklearn/datasets/data/digits.csv.gz";

std::string digits_default_path() {
  const char* env = std::getenv("DDPLAB_DIGITS");
  return env && *env ? env : kDigitsDefaultPath;
}

Dataset load_digits(const std::string& path) {
  gzFile f = gzopen(path.c_str(), "rb");
  if (!f) throw UsageError("--data " + path + ": cannot open (install python3-sklearn, or give a copy of digits.csv.gz with --data or DDPLAB_DIGITS)");
  std::string text;
  char buf[1 << 16];
  int n;
  while ((n = gzread(f, buf, sizeof buf)) > 0 && text.size() < (16u << 20)) text.append(buf, static_cast<size_t>(n));
  const bool failed = n < 0;
  gzclose(f);
  if (failed) throw UsageError("--data " + path + ": not a readable gzip file");
  Dataset d;
  d.x.resize(kDigitsTotal, 64);
  d.y = Matrix::Zero(kDigitsTotal, 10);
  std::istringstream in(text);
  std::string line;
  int64_t row = 0;
  while (std::getline(in, line) && !line.empty()) {
    if (row >= kDigitsTotal) throw UsageError(fmt::format("--data {}: more than {} rows", path, kDigitsTotal));
    std::istringstream cells(line);
    std::string cell;
    int64_t col = 0;
    while (std::getline(cells, cell, ',')) {
      char* end = nullptr;
      const double v = std::strtod(cell.c_str(), &end);
      const double max = col < 64 ? 16 : 9;
      if (cell.empty() || *end != '\0' || v != std::floor(v) || v < 0 || v > max || col > 64) {
        throw UsageError(fmt::format("--data {}: row {} column {}: expected 64 pixels 0..16 then a label 0..9, got '{}'",
                                     path, row + 1, col + 1, cell.substr(0, 20)));
      }
      if (col < 64) {
        d.x(row, col) = static_cast<float>(v / 16.0);
      } else {
        d.labels.push_back(static_cast<int64_t>(v));
        d.y(row, static_cast<int64_t>(v)) = 1.0f;
      }
      ++col;
    }
    if (col != 65) throw UsageError(fmt::format("--data {}: row {} has {} values, expected 65", path, row + 1, col));
    ++row;
  }
  if (row != kDigitsTotal) throw UsageError(fmt::format("--data {}: {} rows, expected {}", path, row, kDigitsTotal));
  return d;
}

Dataset subset(const Dataset& d, const std::vector<int64_t>& indices) {
  Dataset s;
  s.x = d.gather_x(indices);
  s.y = d.gather_y(indices);
  if (!d.labels.empty()) s.labels = d.gather_labels(indices);
  return s;
}

DistributedSampler::DistributedSampler(int64_t dataset_len, int64_t num_replicas, int64_t rank, bool shuffle,
                                       uint64_t seed, bool drop_last)
    : dataset_len_(dataset_len),
      num_replicas_(num_replicas),
      rank_(rank),
      shuffle_(shuffle),
      seed_(seed),
      drop_last_(drop_last) {
  if (num_replicas < 1 || rank < 0 || rank >= num_replicas) {
    throw std::invalid_argument("DistributedSampler: need 0 <= rank < num_replicas");
  }
  if (drop_last && dataset_len % num_replicas != 0) {
    num_samples_ = (dataset_len - num_replicas + num_replicas - 1) / num_replicas;  // ceil((N-R)/R)
  } else {
    num_samples_ = (dataset_len + num_replicas - 1) / num_replicas;  // ceil(N/R)
  }
}

std::vector<int64_t> DistributedSampler::indices() const {
  std::vector<int64_t> idx;
  if (shuffle_) {
    Generator g(seed_ + static_cast<uint64_t>(epoch_));
    idx = g.randperm(dataset_len_);
  } else {
    idx.resize(static_cast<size_t>(dataset_len_));
    std::iota(idx.begin(), idx.end(), int64_t{0});
  }
  const auto total = static_cast<size_t>(total_size());
  if (!drop_last_) {
    // Pad by repeating from the start; the whole list is repeated when the padding exceeds it.
    const size_t n = idx.size();
    for (size_t i = 0; idx.size() < total && n > 0; ++i) idx.push_back(idx[i % n]);
  } else {
    idx.resize(total);
  }
  std::vector<int64_t> mine;
  for (size_t i = static_cast<size_t>(rank_); i < total; i += static_cast<size_t>(num_replicas_)) {
    mine.push_back(idx[i]);
  }
  return mine;
}

DataLoader::DataLoader(int64_t dataset_len, int64_t batch_size, bool shuffle, bool drop_last, Generator& gen)
    : sampler_len_(dataset_len), batch_size_(batch_size), drop_last_(drop_last), gen_(&gen) {
  if (shuffle) {
    sampler_ = [dataset_len, &gen]() {
      // RandomSampler without a generator: seed a fresh Generator from the global one, then randperm.
      Generator local(static_cast<uint64_t>(gen.random_int64()));
      return local.randperm(dataset_len);
    };
  } else {
    sampler_ = [dataset_len]() {
      std::vector<int64_t> idx(static_cast<size_t>(dataset_len));
      std::iota(idx.begin(), idx.end(), int64_t{0});
      return idx;
    };
  }
}

DataLoader::DataLoader(const DistributedSampler& sampler, int64_t batch_size, bool drop_last, Generator& gen)
    : sampler_([&sampler]() { return sampler.indices(); }),
      sampler_len_(sampler.num_samples()),
      batch_size_(batch_size),
      drop_last_(drop_last),
      gen_(&gen) {}

std::vector<std::vector<int64_t>> DataLoader::iter() {
  gen_->random_int64();  // _BaseDataLoaderIter's _base_seed, drawn before the sampler runs
  const std::vector<int64_t> order = sampler_();
  std::vector<std::vector<int64_t>> batches;
  for (size_t start = 0; start < order.size(); start += static_cast<size_t>(batch_size_)) {
    const size_t end = std::min(order.size(), start + static_cast<size_t>(batch_size_));
    if (drop_last_ && end - start < static_cast<size_t>(batch_size_)) break;
    batches.emplace_back(order.begin() + static_cast<std::ptrdiff_t>(start),
                         order.begin() + static_cast<std::ptrdiff_t>(end));
  }
  return batches;
}

int64_t DataLoader::len() const {
  return drop_last_ ? sampler_len_ / batch_size_ : (sampler_len_ + batch_size_ - 1) / batch_size_;
}

}  // namespace ddplab
