// What running a training run's step program through an allocator gives, whoever runs it (the
// trial runner over an executor, measure/trial.h; the replay on virtual memory, alloc/sim_run.h):
// whether it fit, where it ran out of memory if not, and the peaks it reached.
#pragma once

#include <array>
#include <cstddef>
#include <optional>
#include <string>

#include "core/units.h"
#include "program/program.h"

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

// Bytes per Role, indexed by the role (JSON: an object keyed by role name, measure/measurement_json.h).
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

}  // namespace vrambench
