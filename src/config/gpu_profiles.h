// GPU profiles (`--device sim:NAME`): the cards a run can be simulated on, with what a training
// process holds on each outside its caching allocator and the GEMM workspace of its cuBLAS handles.
#pragma once

#include <span>
#include <string_view>

#include "core/units.h"

namespace vrambench {

// The GEMM workspace a process keeps per cuBLAS handle on a card of `compute_capability`:
// PyTorch's default (CublasHandlePool.cpp: CUBLAS_WORKSPACE_CONFIG ":4096:8", 32 MiB, from sm_90;
// ":4096:2:16:8", 8 MiB + 128 KiB, below), which vrambench's own cuBLASLt GEMMs take as their
// scratch too.
constexpr Bytes gemm_workspace_bytes(int compute_capability) {
  return compute_capability >= 90 ? 32 * MiB : 8 * MiB + 128 * KiB;
}

// The most threads an SM of `compute_capability` keeps resident (the CUDA Programming Guide's
// table per compute capability): 2048 on sm_70, 80, 90 and 100, 1024 on sm_75 (Turing), 1536 on
// the other consumer and workstation parts (sm_86, 89, 120).
constexpr int max_threads_per_sm(int compute_capability) {
  switch (compute_capability) {
    case 70:
    case 80:
    case 90:
    case 100:
      return 2048;
    case 75:
      return 1024;
    default:
      return 1536;
  }
}

// What a PyTorch training process holds on a card outside its caching allocator, which
// memory_reserved() does not count and the card's capacity does (docs/memory-model.md, "Outside
// the allocator"): the CUDA context with lazy module loading, 2 KiB per resident thread (half of
// it the 1 KiB stack reserve: 528 MiB on an H100's 132 SMs x 2048 threads; published bare
// contexts from an RTX 4060 Ti to a B200, CUDA 10 to 13, within 5% of it), plus 256 MiB of
// module images and library handles a training step loads (the H200: 0.75 GiB after a Llama
// step), plus 128 MiB for the kernels and the stack growth of later steps (0.87-0.89 GiB once
// bitsandbytes and eager attention had run). Multi-GPU collectives (NCCL) hold more; not here.
constexpr Bytes outside_allocator_bytes(int sms, int compute_capability) {
  return 2 * KiB * sms * max_threads_per_sm(compute_capability) + 256 * MiB + 128 * MiB;
}

// A GPU as the driver reports it. Totals are `nvidia-smi`'s (approximate: they vary by board and
// driver); what a training process holds outside the allocator follows from the SMs
// (outside_allocator_bytes), and is replaced by the measured baseline on a real device.
struct GpuProfile {
  std::string_view name;   // "h100-80gb"
  std::string_view label;  // "H100 SXM 80GB"
  Bytes total;             // memory the driver reports as total
  int compute_capability;  // 90 for sm_90
  int sms;                 // streaming multiprocessors
  // CUDA context, module images, library handles: held before any tensor is allocated.
  Bytes context_overhead() const { return outside_allocator_bytes(sms, compute_capability); }
  Bytes gemm_workspace() const { return gemm_workspace_bytes(compute_capability); }
};

std::span<const GpuProfile> gpu_profiles();
// Accepts "h100-80gb" or "sim:h100-80gb". Throws UsageError listing the known names.
const GpuProfile& find_gpu_profile(std::string_view name);

// The profile `--device auto` falls back to when no GPU is present.
inline constexpr std::string_view kDefaultProfile = "h100-80gb";

}  // namespace vrambench
