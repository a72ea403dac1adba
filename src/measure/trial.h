// One trial: replay a step program through an allocator (and, for cpu/cuda, an executor) and say
// whether it fit, where it ran out of memory if not, and the peaks it reached.
#pragma once

#include <optional>
#include <string>

#include "alloc/allocator.h"
#include "alloc/run_result.h"
#include "core/units.h"
#include "device/executor.h"
#include "program/program.h"
#include "program/schedule.h"

namespace vrambench {

// Runs the training run of `schedule` (program/schedule.h: its steps one after the other, without
// emptying the cache between them; from the second step on, a step starts from what the one
// before it left cached, the steady state a caching allocator reaches). Resets the
// allocator's peaks first; frees every block and releases the allocator's cache before returning,
// fit or not, so the next trial starts clean. An OOM is a result, never an exception; other
// failures (an executor error, a schedule of another program) throw after the memory has been
// returned.
// `executor` may be nullptr (sim): then nothing is initialised or run. Tensors of role
// paged_optimizer_state come from `paged` (managed memory: not in the peaks, counted in
// paged_bytes); a program with such tensors and no `paged` allocator throws InternalError.
TrialResult run_step(const Program& program, const Schedule& schedule, Allocator& allocator,
                     Executor* executor, Bytes fixed_overhead,
                     const SegmentSource* sampled = nullptr, Allocator* paged = nullptr);
// The same over a schedule of `steps` steps made here.
TrialResult run_step(const Program& program, const Liveness& liveness, Allocator& allocator,
                     Executor* executor, Bytes fixed_overhead, int steps = 1,
                     const SegmentSource* sampled = nullptr, Allocator* paged = nullptr);

}  // namespace vrambench
