// CUDA glue for the CLI. Built both with and without the CUDA backend.
#include "cli/gpu.h"

#include <fmt/format.h>

#include <cstdio>

#include "cpu/executor.h"
#include "device/cpu_source.h"

namespace vrambench {

#ifndef VRAMBENCH_HAVE_CUDA
GpuPresence probe_gpu() { return {false, "built without CUDA"}; }
#endif

DeviceSpec resolve_device(const RunConfig& cfg, std::string* note) {
  const GpuPresence gpu = probe_gpu();
  return resolve_host_device(cfg, gpu.why, note);
}

SourceFactory sources_for(const DeviceSpec& device) {
  if (device.kind == DeviceKind::cpu)
    return [](Bytes capacity) { return make_host_source(capacity); };
  return virtual_sources();
}

ExecutorFactory executors_for(const DeviceSpec& device) {
  if (device.kind == DeviceKind::cpu) return [] { return make_cpu_executor(1234); };
  return {};
}

#ifndef VRAMBENCH_HAVE_CUDA
Table gpu_table() { return {}; }

int run_selftest() {
  std::fprintf(stderr, "vrambench: selftest needs a GPU: this build has no CUDA support\n");
  return 1;
}
#endif

}  // namespace vrambench
