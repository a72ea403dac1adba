// Named model shapes (`--preset`) and GPU profiles (`--device sim:NAME`).
#pragma once

#include <span>
#include <string>
#include <string_view>

#include "core/config.h"
#include "core/units.h"

namespace vrambench {

struct Preset {
  std::string_view name;
  std::string_view description;
  ModelConfig model;
};

std::span<const Preset> presets();
// Throws UsageError listing the known names when `name` is unknown.
const Preset& find_preset(std::string_view name);

// The GEMM workspace a process keeps per cuBLAS handle on a card of `compute_capability`:
// PyTorch's default (CublasHandlePool.cpp: CUBLAS_WORKSPACE_CONFIG ":4096:8", 32 MiB, from sm_90;
// ":4096:2:16:8", 8 MiB + 128 KiB, below), which vrambench's own cuBLASLt GEMMs take as their
// scratch too.
constexpr Bytes gemm_workspace_bytes(int compute_capability) {
  return compute_capability >= 90 ? 32 * MiB : 8 * MiB + 128 * KiB;
}

// A GPU as the driver reports it. Totals are `nvidia-smi`'s (approximate: they vary by board and
// driver); the context overhead is a typical CUDA context with lazy module loading plus the
// cuBLASLt/cuDNN handles, which the device holds before any tensor is allocated.
struct GpuProfile {
  std::string_view name;   // "h100-80gb"
  std::string_view label;  // "H100 SXM 80GB"
  Bytes total;             // memory the driver reports as total
  Bytes context_overhead;  // CUDA context, module images, library handles
  int compute_capability;  // 90 for sm_90
  Bytes gemm_workspace() const { return gemm_workspace_bytes(compute_capability); }
};

std::span<const GpuProfile> gpu_profiles();
// Accepts "h100-80gb" or "sim:h100-80gb". Throws UsageError listing the known names.
const GpuProfile& find_gpu_profile(std::string_view name);

// The profile `--device auto` falls back to when no GPU is present.
inline constexpr std::string_view kDefaultProfile = "h100-80gb";

}  // namespace vrambench
