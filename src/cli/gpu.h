// The CLI's bridge to the CUDA device: compiled with the CUDA backend when the build has one, and
// answering "no GPU: built without CUDA" otherwise. Nothing here touches CUDA in the parent of an
// isolated sweep.
#pragma once

#include <string>
#include <vector>

#include "core/config.h"
#include "device/device.h"
#include "report/table.h"
#include "search/measure.h"

namespace vrambench {

struct GpuPresence {
  bool available = false;
  std::string why;  // why not, in a few words ("built without CUDA", "no CUDA driver found")
};
// Asked once per process, in a child process: the caller keeps no CUDA context, so it can still
// fork children that use the GPU.
GpuPresence probe_gpu();

// The CUDA side (cuda_cli.cpp in CUDA builds; stubs otherwise). resolve_gpu_device measures the
// context overhead in a child process; the factories are for use in a measuring child only.
DeviceSpec resolve_gpu_device(const RunConfig& cfg);
// `async`: segments from cudaMallocAsync on a pool of their own, else cudaMalloc.
SourceFactory gpu_sources(bool async);
// `flash_impl` ("auto", "cudnn" or "kernels", checked by the caller): what runs flash attention,
// see FlashImpl in device/cuda_device.h; cuDNN never falls back to the kernels.
ExecutorFactory gpu_executors(const std::string& flash_impl);

// Resolves cfg.device for every kind, cuda included.
DeviceSpec resolve_device(const RunConfig& cfg, std::string* note);
SourceFactory sources_for(const DeviceSpec& device, bool cuda_async = false);
// `execute` false: allocation alone (--no-execute), nothing runs on the device.
ExecutorFactory executors_for(const DeviceSpec& device, bool execute = true,
                              const std::string& flash_impl = "auto");

// `vrambench devices`: the detected GPUs as a table (empty when there are none).
Table gpu_table();
// `vrambench selftest`: prints the table and returns the exit code.
int run_selftest();

}  // namespace vrambench
