// Rotary embedding kernels.
#include "cuda/check.h"
#include "cuda/rope.h"

namespace vrambench::cuda {
namespace {
template <typename T>
__global__ void rope_kernel(T* out, const T* in, RopeShape s, bool inverse) {
  VB_GRID_STRIDE(i, s.elements()) rope_body(i, out, in, s, inverse);
}

void launch(DType dtype, void* out, const void* in, RopeShape s, bool inverse,
            cudaStream_t stream) {
  dispatch_float(dtype, [&](auto tag) {
    using T = decltype(tag);
    rope_kernel<T><<<grid_for(s.elements(), 256), 256, 0, stream>>>(
        static_cast<T*>(out), static_cast<const T*>(in), s, inverse);
  });
  VB_CHECK_LAUNCH("rope_kernel");
}
}  // namespace

void launch_rope_fwd(DType dtype, void* qkv_rot, const void* qkv, RopeShape shape,
                     cudaStream_t stream) {
  launch(dtype, qkv_rot, qkv, shape, false, stream);
}
void launch_rope_bwd(DType dtype, void* dqkv, const void* dqkv_rot, RopeShape shape,
                     cudaStream_t stream) {
  launch(dtype, dqkv, dqkv_rot, shape, true, stream);
}

}  // namespace vrambench::cuda
