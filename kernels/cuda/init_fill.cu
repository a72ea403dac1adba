// The fill kernel: a grid-stride loop over the shared element body.
#include <stdexcept>

#include "cuda/check.h"
#include "cuda/init_fill.h"
#include "cuda/types.h"

namespace vrambench::cuda {
namespace {
__global__ void init_kernel(void* data, DType dtype, std::int64_t n, kmath::InitRule rule) {
  VB_GRID_STRIDE(i, n) kmath::init_element(data, dtype, rule, i);
}
// Element i gets the rule's value of element first + i (a slice of a longer tensor's stream).
__global__ void init_offset_kernel(void* data, DType dtype, std::int64_t n, kmath::InitRule rule,
                                   std::int64_t first) {
  VB_GRID_STRIDE(i, n) kmath::store(data, dtype, i, kmath::init_value(rule, first + i));
}
}  // namespace

void launch_init_offset(void* data, DType dtype, std::int64_t n, const kmath::InitRule& rule,
                        std::int64_t first, cudaStream_t stream) {
  if (n <= 0) return;
  if (dtype == DType::i32 || first < 0)
    throw std::invalid_argument("launch_init_offset: floating data, first >= 0");
  init_offset_kernel<<<grid_for(n, 256), 256, 0, stream>>>(data, dtype, n, rule, first);
  VB_CHECK_LAUNCH("init_offset_kernel");
}

void launch_init(void* data, DType dtype, std::int64_t n, const kmath::InitRule& rule,
                 cudaStream_t stream) {
  if (n <= 0) return;
  if (rule.kind == kmath::InitKind::zeros) {
    VB_CUDA_CHECK(
        cudaMemsetAsync(data, 0, static_cast<std::size_t>(n * dtype_size(dtype)), stream));
    return;
  }
  init_kernel<<<grid_for(n, 256), 256, 0, stream>>>(data, dtype, n, rule);
  VB_CHECK_LAUNCH("init_kernel");
}

}  // namespace vrambench::cuda
