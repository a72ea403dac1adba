// Optimizer kernels.
#include <stdexcept>
#include <string>

#include "cuda/check.h"
#include "cuda/op_table.h"
#include "cuda/optimizer.h"

namespace vrambench::cuda {
namespace {
// N: kOptimizerPack where every array starts a pack (packs_aligned), else 1.
template <int N, typename T, typename S>
__global__ void adamw_kernel(T* w, const T* grad, S* m, S* v, float* master, AdamWParams p,
                             std::int64_t n) {
  optimizer_thread<N>(
      static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x,
      static_cast<std::int64_t>(gridDim.x) * blockDim.x, n,
      [&](std::int64_t i) { adamw_pack_body<N>(i, w, grad, m, v, master, p); },
      [&](std::int64_t i) { adamw_body(i, w, grad, m, v, master, p); });
}
template <int N, typename T, typename S>
__global__ void sgd_kernel(T* w, const T* grad, S* momentum, float* master, SgdParams p,
                           std::int64_t n) {
  optimizer_thread<N>(
      static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x,
      static_cast<std::int64_t>(gridDim.x) * blockDim.x, n,
      [&](std::int64_t i) { sgd_pack_body<N>(i, w, grad, momentum, master, p); },
      [&](std::int64_t i) { sgd_body(i, w, grad, momentum, master, p); });
}

// Calls f(T{}, S{}) with T the weight's storage type and S the state's: fp32 or T.
template <typename F>
void dispatch_weight_and_state(DType dtype, DType state_dtype, F&& f) {
  dispatch_float(dtype, [&](auto tag) {
    using T = decltype(tag);
    if (state_dtype == DType::f32) {
      f(tag, float{});
    } else if (state_dtype == dtype) {
      f(tag, T{});
    } else {
      throw std::invalid_argument(
          "CUDA optimizer kernels: state in " + std::string(dtype_name(state_dtype)) + " beside " +
          std::string(dtype_name(dtype)) + " weights; it is fp32 or the weights' dtype");
    }
  });
}
}  // namespace

void launch_adamw(DType dtype, DType state_dtype, void* w, const void* grad, void* m, void* v,
                  float* master, AdamWParams params, std::int64_t n, cudaStream_t stream) {
  dispatch_weight_and_state(dtype, state_dtype, [&](auto tag, auto state_tag) {
    using T = decltype(tag);
    using S = decltype(state_tag);
    auto* tw = static_cast<T*>(w);
    const auto* tg = static_cast<const T*>(grad);
    auto *sm = static_cast<S*>(m), *sv = static_cast<S*>(v);
    if (packs_aligned<kOptimizerPack>(tw, tg, sm, sv, master)) {
      adamw_kernel<kOptimizerPack, T, S>
          <<<grid_for(n / kOptimizerPack, 256), 256, 0, stream>>>(tw, tg, sm, sv, master,
                                                                      params, n);
    } else {
      adamw_kernel<1, T, S><<<grid_for(n, 256), 256, 0, stream>>>(tw, tg, sm, sv, master, params,
                                                                   n);
    }
  });
  VB_CHECK_LAUNCH("adamw_kernel");
}

void launch_sgd(DType dtype, DType state_dtype, void* w, const void* grad, void* momentum,
                float* master, SgdParams params, std::int64_t n, cudaStream_t stream) {
  dispatch_weight_and_state(dtype, state_dtype, [&](auto tag, auto state_tag) {
    using T = decltype(tag);
    using S = decltype(state_tag);
    auto* tw = static_cast<T*>(w);
    const auto* tg = static_cast<const T*>(grad);
    auto* sm = static_cast<S*>(momentum);
    if (packs_aligned<kOptimizerPack>(tw, tg, sm, master)) {
      sgd_kernel<kOptimizerPack, T, S>
          <<<grid_for(n / kOptimizerPack, 256), 256, 0, stream>>>(tw, tg, sm, master, params,
                                                                      n);
    } else {
      sgd_kernel<1, T, S><<<grid_for(n, 256), 256, 0, stream>>>(tw, tg, sm, master, params, n);
    }
  });
  VB_CHECK_LAUNCH("sgd_kernel");
}

}  // namespace vrambench::cuda

namespace vrambench {

// In place on the weight, its state (fp32 or the weight's dtype) and its fp32 master copy.
void cuda_run_adamw_step(const Operands& a, CudaContext& context) {
  const OptimizerOperands o = optimizer_operands(a);
  cuda::launch_adamw(o.dtype, o.state_dtype, o.w, o.grad, o.m, o.v, o.master,
                     adam_params(a.op, context.optimizer_steps.next(a.in[0])), o.elements,
                     context.stream());
}

void cuda_run_sgd_step(const Operands& a, CudaContext& context) {
  const OptimizerOperands o = optimizer_operands(a);
  cuda::launch_sgd(o.dtype, o.state_dtype, o.w, o.grad, o.m, o.master, sgd_params(a.op), o.elements,
                   context.stream());
}

}  // namespace vrambench
