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
GpuPresence probe_gpu();

// Resolves cfg.device for every kind, cuda included.
DeviceSpec resolve_device(const RunConfig& cfg, std::string* note);
SourceFactory sources_for(const DeviceSpec& device);
ExecutorFactory executors_for(const DeviceSpec& device);

// `vrambench devices`: the detected GPUs as a table (empty when there are none).
Table gpu_table();
// `vrambench selftest`: prints the table and returns the exit code.
int run_selftest();

}  // namespace vrambench
