// The allocator's share of the estimate (allocator_share.cpp), internal to src/estimate/ and its
// tests: the step program's training run replayed through the configuration's allocator policy on
// virtual memory (alloc/sim_run.h, the sim device's trial too).
#pragma once

#include <cstdint>

#include "alloc/sim_run.h"
#include "config/run_config.h"
#include "core/units.h"
#include "estimate/estimate.h"

namespace vrambench::allocator_share {

// The capacity the share is replayed on: the device's less its context, or none (a limit no run
// reaches) without a capacity.
Bytes share_capacity(const DeviceOverhead& overhead);

// Adds the allocator's share to `out` (the tensors' breakdown of cfg's step): what it reserves
// beyond the tensors' peak, as a line through the two batches where it decides the answer (the
// largest batch whose replay fits `overhead.capacity` and the one after it; without a capacity, or
// with `overhead.share_at_batch`, cfg's batch and the one after it), so that there the estimate's
// peak is the replay's. `runs` replays cfg's run on share_capacity(overhead).
void fit_allocator_share(Breakdown& out, SimRuns& runs, const RunConfig& cfg,
                         const DeviceOverhead& overhead);

}  // namespace vrambench::allocator_share
