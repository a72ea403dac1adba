// Which device a run measures on, and what it holds before any tensor: `sim:PROFILE` (virtual
// segments, the profile's context overhead), `cpu` (capped host memory, real math) or `cuda`.
#pragma once

#include <string>

#include "core/config.h"
#include "core/presets.h"
#include "core/units.h"

namespace vrambench {

enum class DeviceKind { sim, cpu, cuda };

struct DeviceSpec {
  DeviceKind kind = DeviceKind::sim;
  std::string label;         // "sim:h100-80gb (H100 SXM 80GB)"
  Bytes total = 0;           // the card's memory (or --vram): what device_peak is compared with
  Bytes fixed_overhead = 0;  // context and library handles, held before the step
  Bytes gemm_workspace = 0;  // cuBLASLt workspace, a tensor of the program
  const GpuProfile* profile = nullptr;  // sim only
  int trial_steps = 1;  // steps per trial: 2 on a GPU, whose second step is the steady state
  // A real device whose libraries load code and build plans on first use (cuda): the measuring
  // process runs a warm-up trial at batch 1 first and then measures the fixed overhead itself, as
  // the driver reports it, so what the step cannot use is counted once everything is loaded.
  bool warm_up = false;

  // What the segment source may hand out to the step's tensors.
  Bytes tensor_capacity() const { return total > fixed_overhead ? total - fixed_overhead : 0; }
};

// The default capacity of the cpu device when --vram is not given.
inline constexpr Bytes kDefaultCpuCapacity = 1 * GiB;

// Resolves cfg.device for the host-side kinds: "sim:PROFILE", "cpu", and "auto" when no GPU is
// present (then `note` says which profile was picked and why). "cuda" and "auto" with a GPU are
// resolved by the caller that links the CUDA device. --vram (cfg.vram) replaces the total.
// Throws UsageError for an unknown device or profile.
DeviceSpec resolve_host_device(const RunConfig& cfg, const std::string& why_no_gpu,
                               std::string* note);

}  // namespace vrambench
