// Fused attention kernels: thin wrappers over the bodies in flash.h.
#include <stdexcept>
#include <string>

#include "cuda/check.h"
#include "cuda/flash.h"

namespace vrambench::cuda {
namespace {
// Each thread holds up to 2 * kFlashMaxHeadDim fp32 accumulators: small blocks keep occupancy sane.
constexpr unsigned kBlock = 64;

template <typename T>
__global__ void flash_fwd_kernel(T* y, float* lse, const T* qkv, FlashShape s) {
  VB_GRID_STRIDE(r, s.batch * s.heads * s.seq) flash_fwd_body(r, y, lse, qkv, s);
}
template <typename T>
__global__ void flash_bwd_dq_kernel(T* dqkv, const T* dy, const T* qkv, const T* y,
                                    const float* lse, FlashShape s) {
  VB_GRID_STRIDE(r, s.batch * s.heads * s.seq) flash_bwd_dq_body(r, dqkv, dy, qkv, y, lse, s);
}
template <typename T>
__global__ void flash_bwd_dkv_kernel(T* dqkv, const T* dy, const T* qkv, const T* y,
                                     const float* lse, FlashShape s) {
  VB_GRID_STRIDE(r, s.batch * s.kv_heads * s.seq) flash_bwd_dkv_body(r, dqkv, dy, qkv, y, lse, s);
}
}  // namespace

void check_flash_shape(const FlashShape& s) {
  if (s.head_dim <= 0 || s.head_dim > kFlashMaxHeadDim)
    throw std::invalid_argument("flash attention: head size " + std::to_string(s.head_dim) +
                                " is outside 1.." + std::to_string(kFlashMaxHeadDim));
  if (s.kv_heads <= 0 || s.heads % s.kv_heads != 0)
    throw std::invalid_argument("flash attention: " + std::to_string(s.heads) +
                                " heads are not a multiple of " + std::to_string(s.kv_heads) +
                                " kv heads");
}

void launch_flash_fwd(DType dtype, void* y, float* lse, const void* qkv, const FlashShape& s,
                      cudaStream_t stream) {
  check_flash_shape(s);
  const std::int64_t rows = s.batch * s.heads * s.seq;
  dispatch_float(dtype, [&](auto tag) {
    using T = decltype(tag);
    flash_fwd_kernel<T><<<grid_for(rows, kBlock), kBlock, 0, stream>>>(
        static_cast<T*>(y), lse, static_cast<const T*>(qkv), s);
  });
  VB_CHECK_LAUNCH("flash_fwd_kernel");
}

void launch_flash_bwd(DType dtype, void* dqkv, const void* dy, const void* qkv, const void* y,
                      const float* lse, const FlashShape& s, cudaStream_t stream) {
  check_flash_shape(s);
  const std::int64_t q_rows = s.batch * s.heads * s.seq, kv_rows = s.batch * s.kv_heads * s.seq;
  dispatch_float(dtype, [&](auto tag) {
    using T = decltype(tag);
    flash_bwd_dq_kernel<T><<<grid_for(q_rows, kBlock), kBlock, 0, stream>>>(
        static_cast<T*>(dqkv), static_cast<const T*>(dy), static_cast<const T*>(qkv),
        static_cast<const T*>(y), lse, s);
    VB_CHECK_LAUNCH("flash_bwd_dq_kernel");
    flash_bwd_dkv_kernel<T><<<grid_for(kv_rows, kBlock), kBlock, 0, stream>>>(
        static_cast<T*>(dqkv), static_cast<const T*>(dy), static_cast<const T*>(qkv),
        static_cast<const T*>(y), lse, s);
    VB_CHECK_LAUNCH("flash_bwd_dkv_kernel");
  });
}

}  // namespace vrambench::cuda
