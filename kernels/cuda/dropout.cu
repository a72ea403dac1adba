// Dropout kernels.
#include "cuda/check.h"
#include "cuda/dropout.h"
#include "cuda/op_table.h"

namespace vrambench::cuda {
namespace {
template <typename T>
__global__ void dropout_fwd_kernel(T* y, std::uint8_t* mask, const T* x, float p,
                                   std::uint64_t seed, std::int64_t n) {
  VB_GRID_STRIDE(i, n) dropout_fwd_body(i, y, mask, x, p, seed);
}
template <typename T>
__global__ void dropout_bwd_kernel(T* dx, const T* dy, const std::uint8_t* mask, float p,
                                   std::int64_t n) {
  VB_GRID_STRIDE(i, n) dropout_bwd_body(i, dx, dy, mask, p);
}
}  // namespace

void launch_dropout_fwd(DType dtype, void* y, std::uint8_t* mask, const void* x, float p,
                        std::uint64_t seed, std::int64_t n, cudaStream_t stream) {
  dispatch_float(dtype, [&](auto tag) {
    using T = decltype(tag);
    dropout_fwd_kernel<T><<<grid_for(n, 256), 256, 0, stream>>>(
        static_cast<T*>(y), mask, static_cast<const T*>(x), p, seed, n);
  });
  VB_CHECK_LAUNCH("dropout_fwd_kernel");
}

void launch_dropout_bwd(DType dtype, void* dx, const void* dy, const std::uint8_t* mask, float p,
                        std::int64_t n, cudaStream_t stream) {
  dispatch_float(dtype, [&](auto tag) {
    using T = decltype(tag);
    dropout_bwd_kernel<T><<<grid_for(n, 256), 256, 0, stream>>>(
        static_cast<T*>(dx), static_cast<const T*>(dy), mask, p, n);
  });
  VB_CHECK_LAUNCH("dropout_bwd_kernel");
}

}  // namespace vrambench::cuda

namespace vrambench {

void cuda_run_dropout_fwd(const Operands& a, CudaContext& context) {
  cuda::launch_dropout_fwd(a.dtype(), a.out[0].data, a.u8(a.out[1]), a.in[0].data,
                           static_cast<float>(a.op.dropout_p), a.op.seed,
                           a.in[0].tensor->elements(), context.stream());
}

void cuda_run_dropout_bwd(const Operands& a, CudaContext& context) {
  cuda::launch_dropout_bwd(a.dtype(), a.out[0].data, a.in[0].data, a.u8(a.in[1]),
                           static_cast<float>(a.op.dropout_p), a.in[0].tensor->elements(),
                           context.stream());
}

}  // namespace vrambench
