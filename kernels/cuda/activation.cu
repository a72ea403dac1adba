// GELU, SwiGLU / GeGLU and soft-capping kernels: grid-stride wrappers over the bodies in
// activation.h.
#include "cuda/activation.h"
#include "cuda/check.h"
#include "cuda/op_table.h"

namespace vrambench::cuda {
namespace {
constexpr unsigned kBlock = 256;

template <typename T>
__global__ void gelu_fwd_kernel(T* y, const T* x, std::int64_t n) {
  VB_GRID_STRIDE(i, n) gelu_fwd_body(i, y, x);
}
template <typename T>
__global__ void gelu_bwd_kernel(T* dx, const T* dy, const T* x, std::int64_t n) {
  VB_GRID_STRIDE(i, n) gelu_bwd_body(i, dx, dy, x);
}
template <typename T>
__global__ void swiglu_fwd_kernel(T* y, const T* gate, const T* up, std::int64_t n,
                                  std::int64_t width, std::int64_t ld, bool gelu_gate) {
  VB_GRID_STRIDE(i, n) swiglu_fwd_body(i, y, gate, up, width, ld, gelu_gate);
}
template <typename T>
__global__ void swiglu_bwd_kernel(T* dgate, T* dup, const T* dy, const T* gate, const T* up,
                                  std::int64_t n, std::int64_t width, std::int64_t ld,
                                  bool gelu_gate) {
  VB_GRID_STRIDE(i, n) swiglu_bwd_body(i, dgate, dup, dy, gate, up, width, ld, gelu_gate);
}
template <typename T>
__global__ void softcap_fwd_kernel(T* y, const T* x, std::int64_t n, float cap) {
  VB_GRID_STRIDE(i, n) softcap_fwd_body(i, y, x, cap);
}
template <typename T>
__global__ void softcap_bwd_kernel(T* dx, const T* dy, const T* y, std::int64_t n, float cap) {
  VB_GRID_STRIDE(i, n) softcap_bwd_body(i, dx, dy, y, cap);
}
}  // namespace

void launch_gelu_fwd(DType dtype, void* y, const void* x, std::int64_t n, cudaStream_t stream) {
  dispatch_float(dtype, [&](auto tag) {
    using T = decltype(tag);
    gelu_fwd_kernel<T><<<grid_for(n, kBlock), kBlock, 0, stream>>>(static_cast<T*>(y),
                                                                   static_cast<const T*>(x), n);
  });
  VB_CHECK_LAUNCH("gelu_fwd_kernel");
}

void launch_gelu_bwd(DType dtype, void* dx, const void* dy, const void* x, std::int64_t n,
                     cudaStream_t stream) {
  dispatch_float(dtype, [&](auto tag) {
    using T = decltype(tag);
    gelu_bwd_kernel<T><<<grid_for(n, kBlock), kBlock, 0, stream>>>(
        static_cast<T*>(dx), static_cast<const T*>(dy), static_cast<const T*>(x), n);
  });
  VB_CHECK_LAUNCH("gelu_bwd_kernel");
}

void launch_swiglu_fwd(DType dtype, void* y, const void* gate, const void* up, std::int64_t rows,
                       std::int64_t width, std::int64_t ld, bool gelu_gate, cudaStream_t stream) {
  const std::int64_t n = rows * width;
  dispatch_float(dtype, [&](auto tag) {
    using T = decltype(tag);
    swiglu_fwd_kernel<T><<<grid_for(n, kBlock), kBlock, 0, stream>>>(
        static_cast<T*>(y), static_cast<const T*>(gate), static_cast<const T*>(up), n, width, ld,
        gelu_gate);
  });
  VB_CHECK_LAUNCH("swiglu_fwd_kernel");
}

void launch_swiglu_bwd(DType dtype, void* dgate, void* dup, const void* dy, const void* gate,
                       const void* up, std::int64_t rows, std::int64_t width, std::int64_t ld,
                       bool gelu_gate, cudaStream_t stream) {
  const std::int64_t n = rows * width;
  dispatch_float(dtype, [&](auto tag) {
    using T = decltype(tag);
    swiglu_bwd_kernel<T><<<grid_for(n, kBlock), kBlock, 0, stream>>>(
        static_cast<T*>(dgate), static_cast<T*>(dup), static_cast<const T*>(dy),
        static_cast<const T*>(gate), static_cast<const T*>(up), n, width, ld, gelu_gate);
  });
  VB_CHECK_LAUNCH("swiglu_bwd_kernel");
}

void launch_softcap_fwd(DType dtype, void* y, const void* x, std::int64_t n, float cap,
                        cudaStream_t stream) {
  dispatch_float(dtype, [&](auto tag) {
    using T = decltype(tag);
    softcap_fwd_kernel<T><<<grid_for(n, kBlock), kBlock, 0, stream>>>(
        static_cast<T*>(y), static_cast<const T*>(x), n, cap);
  });
  VB_CHECK_LAUNCH("softcap_fwd_kernel");
}

void launch_softcap_bwd(DType dtype, void* dx, const void* dy, const void* y, std::int64_t n,
                        float cap, cudaStream_t stream) {
  dispatch_float(dtype, [&](auto tag) {
    using T = decltype(tag);
    softcap_bwd_kernel<T><<<grid_for(n, kBlock), kBlock, 0, stream>>>(
        static_cast<T*>(dx), static_cast<const T*>(dy), static_cast<const T*>(y), n, cap);
  });
  VB_CHECK_LAUNCH("softcap_bwd_kernel");
}

}  // namespace vrambench::cuda

namespace vrambench {

void cuda_run_gelu_fwd(const Operands& a, CudaContext& context) {
  cuda::launch_gelu_fwd(a.dtype(), a.out[0].data, a.in[0].data, a.in[0].tensor->elements(),
                        context.stream());
}

void cuda_run_gelu_bwd(const Operands& a, CudaContext& context) {
  cuda::launch_gelu_bwd(a.dtype(), a.out[0].data, a.in[0].data, a.in[1].data,
                        a.in[1].tensor->elements(), context.stream());
}

// Packed (Phi-3's gate_up_proj): up is the second half of each gate|up row.
void cuda_run_swiglu_fwd(const Operands& a, CudaContext& context) {
  const DType dt = a.dtype();
  const GateShape g = gate_shape(a.op, *a.out[0].tensor, *a.in[0].tensor);
  const std::int64_t ld = g.packed ? 2 * g.width : g.width;
  const void* up = g.packed ? cuda::element_offset(a.in[0].data, g.width, dt) : a.in[1].data;
  cuda::launch_swiglu_fwd(dt, a.out[0].data, a.in[0].data, up, g.rows, g.width, ld, a.op.gelu_gate,
                          context.stream());
}

void cuda_run_swiglu_bwd(const Operands& a, CudaContext& context) {
  const DType dt = a.dtype();
  const GateShape g = gate_shape(a.op, *a.in[0].tensor, *a.in[1].tensor);
  const std::int64_t ld = g.packed ? 2 * g.width : g.width;
  const void* up = g.packed ? cuda::element_offset(a.in[1].data, g.width, dt) : a.in[2].data;
  void* dup = g.packed ? cuda::element_offset(a.out[0].data, g.width, dt) : a.out[1].data;
  cuda::launch_swiglu_bwd(dt, a.out[0].data, dup, a.in[0].data, a.in[1].data, up, g.rows, g.width,
                          ld, a.op.gelu_gate, context.stream());
}

void cuda_run_softcap_fwd(const Operands& a, CudaContext& context) {
  cuda::launch_softcap_fwd(a.dtype(), a.out[0].data, a.in[0].data, a.in[0].tensor->elements(),
                           a.op.softcap, context.stream());
}

void cuda_run_softcap_bwd(const Operands& a, CudaContext& context) {
  cuda::launch_softcap_bwd(a.dtype(), a.out[0].data, a.in[0].data, a.in[1].data,
                           a.in[1].tensor->elements(), a.op.softcap, context.stream());
}

}  // namespace vrambench
