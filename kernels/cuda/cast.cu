// Element-wise dtype conversion kernel.
#include "cuda/cast.h"
#include "cuda/check.h"

namespace vrambench::cuda {
namespace {
template <typename To, typename From>
__global__ void cast_kernel(To* y, const From* x, std::int64_t n) {
  VB_GRID_STRIDE(i, n) cast_body(i, y, x);
}
}  // namespace

void launch_cast(DType to, void* y, DType from, const void* x, std::int64_t n,
                 cudaStream_t stream) {
  dispatch_float(to, [&](auto to_tag) {
    using To = decltype(to_tag);
    dispatch_float(from, [&](auto from_tag) {
      using From = decltype(from_tag);
      cast_kernel<To, From><<<grid_for(n, 256), 256, 0, stream>>>(static_cast<To*>(y),
                                                                  static_cast<const From*>(x), n);
    });
  });
  VB_CHECK_LAUNCH("cast_kernel");
}

}  // namespace vrambench::cuda
