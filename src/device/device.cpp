// Resolution of --device for the devices that need no GPU.
#include "device/device.h"

#include <fmt/format.h>

#include "core/error.h"

namespace vrambench {

DeviceSpec resolve_host_device(const RunConfig& cfg, const std::string& why_no_gpu,
                               std::string* note) {
  std::string name = cfg.device;
  if (name == "auto") {
    name = fmt::format("sim:{}", kDefaultProfile);
    if (note) *note = fmt::format("device auto: no GPU ({}); using {}", why_no_gpu, name);
  }
  DeviceSpec spec;
  if (name == "cpu") {
    spec.kind = DeviceKind::cpu;
    spec.total = cfg.vram > 0 ? cfg.vram : kDefaultCpuCapacity;
    spec.label = fmt::format("cpu (host memory capped at {})", format_bytes(spec.total));
    return spec;
  }
  if (name.starts_with("sim:")) {
    const GpuProfile& profile = find_gpu_profile(name);
    spec.kind = DeviceKind::sim;
    spec.profile = &profile;
    spec.total = cfg.vram > 0 ? cfg.vram : profile.total;
    spec.fixed_overhead = profile.context_overhead;
    spec.gemm_workspace = profile.gemm_workspace();
    spec.label = fmt::format("sim:{} ({})", profile.name, profile.label);
    if (cfg.vram > 0) spec.label += fmt::format(", capped at {}", format_bytes(cfg.vram));
    return spec;
  }
  if (name == "cuda") throw UsageError(fmt::format("--device cuda: no GPU ({})", why_no_gpu));
  throw UsageError(fmt::format(
      "invalid --device '{}': use auto, cpu, cuda or sim:PROFILE (see `vrambench devices`)",
      cfg.device));
}

}  // namespace vrambench
