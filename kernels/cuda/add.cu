// Element-wise add kernel.
#include "cuda/add.h"
#include "cuda/check.h"

namespace vrambench::cuda {
namespace {
template <typename T, typename B>
__global__ void add_kernel(T* c, const T* a, const B* b, std::int64_t n) {
  VB_GRID_STRIDE(i, n) add_body(i, c, a, b);
}
}  // namespace

void launch_add(DType dtype, void* c, const void* a, DType b_dtype, const void* b, std::int64_t n,
                cudaStream_t stream) {
  dispatch_float_pair(dtype, b_dtype, [&](auto tag, auto b_tag) {
    using T = decltype(tag);
    using B = decltype(b_tag);
    add_kernel<T, B><<<grid_for(n, 256), 256, 0, stream>>>(
        static_cast<T*>(c), static_cast<const T*>(a), static_cast<const B*>(b), n);
  });
  VB_CHECK_LAUNCH("add_kernel");
}

}  // namespace vrambench::cuda
