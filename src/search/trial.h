// One trial: replay a step program through an allocator (and, for cpu/cuda, an executor) and say
// whether it fit, where it ran out of memory if not, and the peaks it reached.
#pragma once

#include <array>
#include <optional>
#include <string>

#include "alloc/allocator.h"
#include "core/units.h"
#include "device/executor.h"
#include "program/program.h"
#include "program/schedule.h"

namespace vrambench {

// Where a trial ran out of memory.
struct OomInfo {
  std::string op;       // name of the op whose allocation failed; "" = before the first op
  std::string tensor;   // name of the tensor that could not be allocated
  Bytes requested = 0;  // the tensor's bytes, as asked of the allocator
  Bytes free = 0;       // allocator.free_bytes() when the request failed
  bool operator==(const OomInfo&) const = default;
};

// "OOM before the first op allocating 'wte': 1.50 GiB requested, 812.0 KiB free".
std::string to_string(const OomInfo& oom);

// Bytes per Role, indexed by the role (JSON: an object keyed by role name, search/json.h).
struct RoleBytes {
  std::array<Bytes, kRoleCount> bytes{};
  Bytes& operator[](Role r) { return bytes[static_cast<std::size_t>(r)]; }
  Bytes operator[](Role r) const { return bytes[static_cast<std::size_t>(r)]; }
  bool operator==(const RoleBytes&) const = default;
};

struct TrialResult {
  bool fit = false;
  std::optional<OomInfo> oom;  // set exactly when !fit
  // Peak of the program's own live tensor bytes. The allocator's allocated_peak can differ by
  // rounding, so the program's figure is what compares with the analytic model.
  Bytes tensor_peak = 0;
  Bytes reserved_peak = 0;  // the allocator's segments
  Bytes device_peak = 0;    // max(reserved_peak + fixed_overhead, driver_peak)
  Bytes driver_peak = 0;    // highest device_used() sampled around the ops (0 without a driver)
  int peak_op = -1;         // op index at which tensor bytes peaked (-1: before the first op)
  RoleBytes peak_by_role;   // live tensor bytes per Role at the tensor peak
  // Bytes of the paged optimizer state (managed memory, outside tensor_peak and device_peak).
  Bytes paged_bytes = 0;
  bool operator==(const TrialResult&) const = default;
};

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
