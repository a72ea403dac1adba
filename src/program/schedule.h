// A training run of a step program, event by event, in the order the run makes them: the one walk
// of the step that the trial runs (measure/trial.cpp), the estimate's allocator share replays and
// its live lines sum (src/estimate/), the host runner binds (device/host_runner.cpp) and the
// listing prints (report/program_table.cpp). Written once, here, from the liveness.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

#include "program/program.h"

namespace vrambench {

// The steps a trial runs, on every device: a training run's first and a second, which starts from
// the first one's cache, as every later one does from its predecessor's (the steady state, which
// the estimate describes).
inline constexpr int kTrialSteps = 2;

struct RunEvent {
  enum class Kind : std::uint8_t {
    alloc,     // tensor `id` gets memory (before op `op`; op -1: before the first op)
    init,      // tensor `id`, persistent, gets its initial values (right after its memory)
    ready,     // every persistent tensor made before the first op has memory and values
    run,       // op `op` runs
    free,      // tensor `id` goes (after op `op`; op -1: at the end of step `step`)
    step_end,  // step `step` has run its last op: what the step keeps to its end goes next
  };
  Kind kind{};
  std::int16_t step = 0;  // -1 before the first step
  std::int32_t op = -1;
  std::int32_t id = -1;  // the tensor, for alloc, init and free
};

class Schedule {
 public:
  // `steps` steps of `program` (at least one) as a training run takes them, without emptying the
  // cache between them: the persistent tensors but the lazy ones by id (allocated, then filled
  // in id order: a master weight copies its weight, which its builder made first), ready; then
  // each step: for each op, in the first step the lazy tensors it is the first to use (allocated
  // and filled), the tensors it is the first to list, the op, the tensors it is the last to list;
  // at the step's end, step_end and the tensors the step kept to its end (the gradients, as
  // zero_grad(set_to_none=True) frees them), by id.
  Schedule(const Program& program, const Liveness& liveness, int steps);

  std::span<const RunEvent> events() const { return events_; }
  int steps() const { return steps_; }
  std::size_t ops() const { return ops_; }
  std::size_t tensors() const { return tensors_; }
  // The events of step `step` (its allocations, ops, frees and end), without what comes before
  // the first step.
  std::span<const RunEvent> step(int step) const;

 private:
  std::vector<RunEvent> events_;
  std::vector<std::size_t> step_begin_;  // index of each step's first event, and the end
  int steps_ = 0;
  std::size_t ops_ = 0;
  std::size_t tensors_ = 0;
};

// The bytes live after each op of a run's last step (its steady state with two steps or more),
// and the peak: the most bytes live while an op runs, its outputs allocated and nothing freed
// yet, the first op to reach it (-1: the step's start, when no op adds to it).
struct LiveProfile {
  std::vector<Bytes> allocated;   // per op: the bytes allocated before it
  std::vector<Bytes> freed;       // per op: the bytes freed after it
  std::vector<Bytes> live_after;  // per op
  Bytes peak = 0;
  int peak_op = -1;
};
LiveProfile live_profile(const Program& program, const Schedule& schedule);
// Of the run of kTrialSteps steps.
LiveProfile live_profile(const Program& program, const Liveness& liveness);

}  // namespace vrambench
