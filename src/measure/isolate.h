// Runs measure() for one configuration in a child process (device/child_process.h), so that a
// sticky CUDA error or a crash (illegal address, launch failure, abort) poisons only that child:
// the parent never touches the device, and a crashed configuration comes back as a failed
// measurement with its reason.
#pragma once

#include "measure/measure.h"

namespace vrambench {

// What the child does wrong on purpose, to test the crash and timeout paths without a GPU.
enum class Fault { none, abort, segfault, exit_nonzero, hang_up, hang };

// Measures in a forked child and returns what it sent back (as JSON, measure/measurement_json.h);
// on a crash, a Measurement with config, estimate and est_max_batch filled, failure crashed and its
// detail (search left empty). The child reports each trial as it starts and ends: `observe` runs in
// the parent, and a trial (or the device's start before the first) silent for more than
// `trial_timeout_seconds` (0: no limit) is killed with its child; the failure is then timeout, the
// detail names the batch, and the trials that finished before it are kept.
Measurement measure_isolated(const RunConfig& cfg, const Device& device, const SearchLimits& limits,
                             Fault fault = Fault::none, const TrialObserver& observe = {},
                             double trial_timeout_seconds = 0);

// The fault the environment variable VRAMBENCH_FAULT names for `cfg`: abort, segfault, exit or
// hang for every configuration, or e.g. hang@seq=128 for those whose field seq is 128 (to stop a
// sweep part-way in tests); else none.
Fault fault_from_environment(const RunConfig& cfg);

}  // namespace vrambench
