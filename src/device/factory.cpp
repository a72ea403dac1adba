// make_device() for every kind, and the GPU questions of device/gpu.h. The one file of the device
// layer that knows whether the build has CUDA: with it, the cuda parts (device/cuda_device.h) are
// put together here, asked in child processes where a CUDA context must not stay in this one;
// without it, every GPU question answers "built without CUDA".
#include <fmt/format.h>

#include <nlohmann/json.hpp>
#include <optional>

#include "config/gpu_profiles.h"
#include "core/error.h"
#include "device/child_process.h"
#include "device/cpu_executor.h"
#include "device/device.h"
#include "device/gpu.h"
#include "device/sources.h"
#ifdef VRAMBENCH_HAVE_CUDA
#include "device/cuda_device.h"
#endif

namespace vrambench {

// What a child measured crosses the pipe as JSON.
NLOHMANN_JSON_SERIALIZE_ENUM(DeviceKind, {{DeviceKind::sim, "sim"},
                                          {DeviceKind::cpu, "cpu"},
                                          {DeviceKind::cuda, "cuda"}})
NLOHMANN_DEFINE_TYPE_NON_INTRUSIVE(DeviceInfo, kind, label, total, fixed_overhead, gemm_workspace,
                                   trial_steps, warm_up)
NLOHMANN_DEFINE_TYPE_NON_INTRUSIVE(GpuPresence, available, why)

Device sim_device(const GpuProfile& profile, Bytes vram) {
  DeviceInfo info;
  info.total = vram > 0 ? vram : profile.total;
  info.fixed_overhead = profile.context_overhead();
  info.gemm_workspace = profile.gemm_workspace();
  info.label = fmt::format("sim:{} ({})", profile.name, profile.label);
  if (vram > 0) info.label += fmt::format(", capped at {}", format_bytes(vram));
  return simulated(std::move(info));
}

namespace {

Device cpu_device(Bytes vram, const DeviceOptions& options) {
  Device d;
  d.info.kind = DeviceKind::cpu;
  d.info.total = vram > 0 ? vram : kDefaultCpuCapacity;
  d.info.label = fmt::format("cpu (host memory capped at {})", format_bytes(d.info.total));
  d.sources = [](Bytes capacity) { return make_host_source(capacity); };
  if (options.execute) d.executors = [] { return make_cpu_executor(kInitSeed); };
  return d;
}

#ifdef VRAMBENCH_HAVE_CUDA
// The GPU's figures are measured in a child process: a CUDA context in this one would be unusable
// by the children it forks to measure in.
Device cuda_device(const RunConfig& cfg, const DeviceOptions& options) {
  ChildFailure why;
  const std::optional<nlohmann::json> answer =
      run_in_child([&]() -> nlohmann::json { return resolve_cuda_device(cfg); }, &why);
  if (!answer) throw UsageError(fmt::format("--device cuda: {}", to_string(why)));
  Device d;
  d.info = answer->get<DeviceInfo>();
  d.info.warm_up = true;   // modules load and cuDNN plans build on first use
  if (options.memory == CudaMemory::async)
    d.sources = [](Bytes capacity) { return make_cuda_async_source(capacity); };
  else
    d.sources = [](Bytes capacity) { return make_cuda_source(capacity); };
  d.paged_sources = [](Bytes capacity) { return make_cuda_managed_source(capacity); };
  if (options.execute) {
    const FlashImpl flash = options.flash;
    d.executors = [flash] { return make_cuda_executor(kInitSeed, flash); };
  }
  return d;
}
#else
Device cuda_device(const RunConfig&, const DeviceOptions&) {
  throw UsageError("--device cuda: this build has no CUDA support");
}
#endif

}  // namespace

Device make_device(const RunConfig& cfg, const DeviceOptions& options, std::string* note) {
  using Kind = DeviceChoice::Kind;
  switch (cfg.device.kind) {
    case Kind::sim:
      return sim_device(find_gpu_profile(cfg.device.profile), cfg.vram);
    case Kind::cpu:
      return cpu_device(cfg.vram, options);
    case Kind::cuda:
    case Kind::automatic:
      break;
  }
  const GpuPresence gpu = probe_gpu();
  if (gpu.available) return cuda_device(cfg, options);
  if (cfg.device.kind == Kind::cuda)
    throw UsageError(fmt::format("--device cuda: no GPU ({})", gpu.why));
  const GpuProfile& fallback = find_gpu_profile(kDefaultProfile);
  if (note) *note = fmt::format("device auto: no GPU ({}); using sim:{}", gpu.why, fallback.name);
  return sim_device(fallback, cfg.vram);
}

#ifdef VRAMBENCH_HAVE_CUDA
GpuPresence probe_gpu() {
  // Asked in a child: a CUDA context in this process would be unusable by the children it forks.
  static const GpuPresence presence = [] {
    ChildFailure why;
    const std::optional<nlohmann::json> answer = run_in_child(
        []() -> nlohmann::json {
          GpuPresence p;
          p.available = cuda_available(&p.why);
          return p;
        },
        &why);
    if (!answer) return GpuPresence{false, "the GPU probe " + to_string(why)};
    return answer->get<GpuPresence>();
  }();
  return presence;
}

std::vector<CudaDeviceInfo> list_gpus() {
  return query_cuda_devices();
}

std::vector<SelftestRow> run_gpu_selftest() {
  return run_cuda_selftest();
}
#else
GpuPresence probe_gpu() {
  return {false, "built without CUDA"};
}

std::vector<CudaDeviceInfo> list_gpus() {
  return {};
}

std::vector<SelftestRow> run_gpu_selftest() {
  throw NeedsGpu("this build has no CUDA support");
}
#endif

}  // namespace vrambench
