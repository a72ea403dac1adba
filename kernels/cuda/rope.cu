// Rotary embedding kernels.
#include "cuda/check.h"
#include "cuda/op_table.h"
#include "cuda/rope.h"

namespace vrambench::cuda {
namespace {
template <typename T, typename In>
__global__ void rope_kernel(T* out, const In* in, RopeShape s, bool inverse) {
  VB_GRID_STRIDE(i, s.elements()) rope_body(i, out, in, s, inverse);
}

void launch(DType dtype, void* out, DType in_dtype, const void* in, RopeShape s, bool inverse,
            cudaStream_t stream) {
  dispatch_float_pair(dtype, in_dtype, [&](auto tag, auto in_tag) {
    using T = decltype(tag);
    using In = decltype(in_tag);
    rope_kernel<T, In><<<grid_for(s.elements(), 256), 256, 0, stream>>>(
        static_cast<T*>(out), static_cast<const In*>(in), s, inverse);
  });
  VB_CHECK_LAUNCH("rope_kernel");
}
}  // namespace

void launch_rope_fwd(DType dtype, void* qkv_rot, DType in_dtype, const void* qkv, RopeShape shape,
                     cudaStream_t stream) {
  launch(dtype, qkv_rot, in_dtype, qkv, shape, false, stream);
}
void launch_rope_bwd(DType dtype, void* dqkv, DType in_dtype, const void* dqkv_rot, RopeShape shape,
                     cudaStream_t stream) {
  launch(dtype, dqkv, in_dtype, dqkv_rot, shape, true, stream);
}

}  // namespace vrambench::cuda

namespace vrambench {
// The input may be of another dtype (QLoRA's fp32 q|k|v, rotated into 16 bits).
void cuda_run_rope_fwd(const Operands& a, CudaContext& context) {
  cuda::launch_rope_fwd(a.dtype(), a.out[0].data, a.in[0].tensor->dtype, a.in[0].data,
                        attention_shape_as<cuda::RopeShape>(a), context.stream());
}

void cuda_run_rope_bwd(const Operands& a, CudaContext& context) {
  cuda::launch_rope_bwd(a.dtype(), a.out[0].data, a.in[0].tensor->dtype, a.in[0].data,
                        attention_shape_as<cuda::RopeShape>(a), context.stream());
}

}  // namespace vrambench
