// The allocator's share of the estimate (allocator_share.cpp), internal to src/estimate/ and its
// tests: the step program's allocations and frees as events over byte lines in the batch, replayed
// through the configuration's allocator policy on a virtual source.
#pragma once

#include <cstdint>
#include <limits>
#include <vector>

#include "core/config.h"
#include "core/units.h"
#include "estimate/estimate.h"
#include "program/program.h"
#include "program/scaled_program.h"
#include "program/schedule.h"

namespace vrambench::estimate_replay {

// One allocation or free of the step, in the order a trial makes them. A tensor has
// `fixed + batch * per_sample` bytes; its free names its slot (the tensor id) and carries no bytes.
struct TensorEvent {
  std::int32_t slot = 0;
  bool alloc = false;
  Bytes fixed = 0;
  Bytes per_sample = 0;
};
using TensorEvents = std::vector<TensorEvent>;

// What the training run of `schedule` allocates and frees on the device, in its order (the
// trial's: program/schedule.h; paged optimizer state lives in managed memory, outside these), each
// tensor's bytes its line in `lines` or, where `lines` is empty, its bytes in `program`.
TensorEvents step_events(const Program& program, const Schedule& schedule,
                         const std::vector<BatchScaledProgram::Line>& lines);

// What `allocator` reserves at its peak when the step of `events` runs at `batch` on a virtual
// source of `capacity` bytes (the caching allocator frees its cache and retries there, as it does
// on a device), with `fits`; when the step does not fit, what it reserves without a limit.
struct ReplayedPeak {
  Bytes reserved = 0;
  bool fits = false;
};
ReplayedPeak replayed_peak(const TensorEvents& events, std::int64_t batch, AllocatorKind allocator,
                           Bytes capacity = std::numeric_limits<Bytes>::max());

// Adds the allocator's share to `out` (the tensors' breakdown of cfg's step): what it reserves
// beyond the tensors' peak, as a line through the two batches where it decides the answer (the
// largest batch whose replay fits `overhead.capacity` and the one after it; without a capacity, or
// with `overhead.share_at_batch`, cfg's batch and the one after it), so that there the estimate's
// peak is the replay's. `batch_one`: the events at batch 1 where the step's structure differs
// there, else empty.
void fit_allocator_share(Breakdown& out, const TensorEvents& events, const TensorEvents& batch_one,
                         const RunConfig& cfg, const DeviceOverhead& overhead);

}  // namespace vrambench::estimate_replay
