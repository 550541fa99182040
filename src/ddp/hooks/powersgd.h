// --comm-hook powersgd: torch.distributed.algorithms.ddp_comm_hooks.powerSGD_hook with a PowerSGDState, as
// torch 1.13 runs it on CPU/Gloo, bit for bit (tests/powersgd_hook_test against real DDP runs).
//   - iterations before start_powerSGD_iter (state.iter counts backwards: it advances after the bucket with
//     is_last) are allreduce_hook: bucket / float(world_size), then a SUM all-reduce;
//   - afterwards, per bucket: the previous error added (error feedback), each gradient viewed
//     (shape[0], -1) = n x m and compressed iff (n + m) * k * min_compression_rate < n * m with
//     k = min(n, m, rank); the others concatenated, SUM-all-reduced, divided by world_size; for the
//     compressed ones (taken grouped by shape, in first-seen order) P = M Q, all-reduce P (a SUM, not
//     divided), orthogonalise P, Q = M^T P, all-reduce Q and divide, M = P Q^T into the bucket; the error
//     is what the bucket held minus that. Q starts from numpy.random.RandomState(random_seed).randint(1e9)
//     -> torch.manual_seed -> torch.randn(1, m, k) per matrix (Gram-Schmidt'd), then is warm-started.
// matrix_approximation_rank <= 2 only: from 3 on torch orthogonalises with LAPACK's QR, not ported.
// One hook object per rank (it holds that rank's state); every rank must see the same buckets.
#pragma once

#include <memory>

#include "src/ddp/comm_hook.h"

namespace ddplab::ddp {

// Throws UsageError (bad input: one line naming the option and its limit, exit status 2) for a rank outside
// [1, 2], start_powerSGD_iter <= 1 with error feedback or warm start (PowerSGDState's own ValueError) or a
// random_seed above 2^32 - 1 (numpy's RandomState refuses it); run() throws it for a 0-dimensional
// parameter (torch's tensor.shape[0] fails on one).
std::unique_ptr<CommHook> make_powersgd_hook(const CommHookOptions& options);

}  // namespace ddplab::ddp
