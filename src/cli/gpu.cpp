// CUDA glue for the CLI. Built both with and without the CUDA backend.
#include "cli/gpu.h"

#include <cstdio>

#include "core/error.h"
#include "cpu/executor.h"
#include "device/cpu_source.h"

namespace vrambench {

#ifndef VRAMBENCH_HAVE_CUDA
GpuPresence probe_gpu() {
  return {false, "built without CUDA"};
}
DeviceSpec resolve_gpu_device(const RunConfig&) {
  throw UsageError("--device cuda: this build has no CUDA support");
}
SourceFactory gpu_sources(bool) {
  return {};
}
ExecutorFactory gpu_executors(const std::string&) {
  return {};
}
#endif

DeviceSpec resolve_device(const RunConfig& cfg, std::string* note) {
  if (cfg.device != "cuda" && cfg.device != "auto") return resolve_host_device(cfg, "", note);
  const GpuPresence gpu = probe_gpu();
  if (gpu.available) return resolve_gpu_device(cfg);
  return resolve_host_device(cfg, gpu.why, note);
}

SourceFactory sources_for(const DeviceSpec& device, bool cuda_async) {
  switch (device.kind) {
    case DeviceKind::cpu:
      return [](Bytes capacity) { return make_host_source(capacity); };
    case DeviceKind::cuda:
      return gpu_sources(cuda_async);
    case DeviceKind::sim:
      break;
  }
  return virtual_sources();
}

ExecutorFactory executors_for(const DeviceSpec& device, bool execute,
                              const std::string& flash_impl) {
  if (!execute) return {};
  switch (device.kind) {
    case DeviceKind::cpu:
      return [] { return make_cpu_executor(1234); };
    case DeviceKind::cuda:
      return gpu_executors(flash_impl);
    case DeviceKind::sim:
      break;
  }
  return {};
}

#ifndef VRAMBENCH_HAVE_CUDA
Table gpu_table() {
  return {};
}

int run_selftest() {
  std::fprintf(stderr, "vrambench: selftest needs a GPU: this build has no CUDA support\n");
  return 1;
}
#endif

}  // namespace vrambench
