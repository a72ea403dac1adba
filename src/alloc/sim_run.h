// A training run replayed through an allocator policy on virtual memory, no kernel run: the sim
// device's trial, and the estimate's allocator share (estimate/allocator_share.cpp), which are
// therefore one computation. It walks the run's allocations and frees (program/schedule.h) with
// each tensor's bytes a line in the batch, so one list serves every batch.
#pragma once

#include <cstdint>
#include <limits>
#include <map>
#include <memory>
#include <optional>
#include <vector>

#include "alloc/run_result.h"
#include "config/run_config.h"
#include "core/units.h"
#include "program/program.h"
#include "program/scaled_program.h"
#include "program/schedule.h"

namespace vrambench {

// One allocation or free of a run, in its order: tensor `id` (its role and, for an allocation,
// its bytes `fixed + batch * per_sample`), for op `op` (-1: before the first op or at a step's
// end). Paged optimizer state is managed memory: counted apart, never refused.
struct RunAllocation {
  std::int32_t id = 0;
  std::int32_t op = -1;
  bool alloc = false;
  bool paged = false;
  Role role = Role::transient;
  Bytes fixed = 0;
  Bytes per_sample = 0;
};
using RunAllocations = std::vector<RunAllocation>;

// The run's allocations and frees (the schedule's), each tensor's bytes its line in `lines` or,
// where `lines` is empty, its bytes in `program`.
RunAllocations run_allocations(const Program& program, const Schedule& schedule,
                               const std::vector<BatchScaledProgram::Line>& lines);

// The rest of a failed run, replayed without a limit on demand (sim_run.cpp).
struct UnlimitedRest;

// A run at one batch on `capacity` bytes: as a trial runs it (the allocator frees its cache and
// retries at the limit), and where it fails, the same run without a limit (what it needs), which
// is replayed only when asked for: a search reads it at one failing batch, the estimate's bracket
// at the batch after the largest that fits, and most probes that fail never need it.
class SimRun {
 public:
  SimRun();
  SimRun(TrialResult result, std::unique_ptr<UnlimitedRest> rest);
  SimRun(SimRun&&) noexcept;
  SimRun& operator=(SimRun&&) noexcept;
  ~SimRun();

  TrialResult at_capacity;
  // The run without a limit: set exactly when at_capacity did not fit (replayed on the first call
  // from where the run at the capacity first had a segment refused).
  const std::optional<TrialResult>& unlimited() const;
  // The reserved peak the run needs: at the capacity where it fits, else without a limit.
  Bytes needed_reserved() const {
    return at_capacity.fit ? at_capacity.reserved_peak : unlimited()->reserved_peak;
  }

 private:
  mutable std::unique_ptr<UnlimitedRest> rest_;  // null once replayed, or where the run fit
  mutable std::optional<TrialResult> unlimited_;
};

// `names`: a program of the run's structure, for the OOM report's op and tensor names (read before
// sim_run returns). Under the caching allocator the two runs are one until the source first
// refuses a segment: the replay is copied there, and the copy goes on without a limit when asked.
// `run` must outlive the SimRun where it does not fit (the rest reads it).
SimRun sim_run(const RunAllocations& run, const Program& names, std::int64_t batch,
               AllocatorKind allocator, Bytes capacity, Bytes fixed_overhead);

// The runs of one configuration replayed so far, by batch, so that whoever asks again (the
// estimate's share, then the search's trials and what a failing batch needs) reads them: a
// configuration's allocations at `steps` steps on `capacity` bytes.
class SimRuns {
 public:
  SimRuns(BatchScaledProgram& sizes, int steps, AllocatorKind allocator, Bytes capacity,
          Bytes fixed_overhead);
  const SimRun& at(std::int64_t batch);
  Bytes capacity() const { return capacity_; }

 private:
  BatchScaledProgram& sizes_;
  int steps_;
  AllocatorKind allocator_;
  Bytes capacity_;
  Bytes fixed_overhead_;
  std::map<std::int64_t, SimRun> runs_;
  // The structure of batch 2 and up: a program of it (its names; BatchScaledProgram keeps it in
  // place as it rescales it) and its allocations, each size its line.
  const Program* names_ = nullptr;
  RunAllocations lines_;
  // The allocations of the batches built apart (another structure), which their runs read.
  std::map<std::int64_t, RunAllocations> apart_;
};

}  // namespace vrambench
