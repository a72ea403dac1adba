// AdamW and SGD with momentum (kmath::adamw_update / sgd_update), element-wise and in place.
// With fp32 master weights (mixed precision) the update is applied to the master copy and the
// weight is its rounding to the storage type; otherwise to the weight's own values in fp32. The
// gradients are divided by params.grad_scale (the static loss scale of fp16 training) in fp32
// first.
#pragma once

#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>

#include "common/math.h"
#include "core/dtype.h"
#include "cuda/types.h"

namespace vrambench::cuda {

using AdamWParams = kmath::AdamParams;
using SgdParams = kmath::SgdParams;

// T is the weight's (and gradient's) storage, S the state's: fp32, or T itself where PyTorch keeps
// the state in the parameter's dtype (torch.optim.AdamW and SGD make it zeros_like(param), so a
// bf16 model without master weights has bf16 moments). The update runs in fp32 either way and the
// state is stored rounded, as the cpu reference does.
template <typename T, typename S>
__host__ __device__ inline void adamw_body(std::int64_t i, T* w, const T* grad, S* m, S* v,
                                           float* master, AdamWParams p) {
  float param = master != nullptr ? master[i] : to_f32(w[i]);
  float mi = to_f32(m[i]), vi = to_f32(v[i]);
  kmath::adamw_update(&param, to_f32(grad[i]), &mi, &vi, p);
  m[i] = from_f32<S>(mi);
  v[i] = from_f32<S>(vi);
  if (master != nullptr) master[i] = param;
  w[i] = from_f32<T>(param);
}

template <typename T, typename S>
__host__ __device__ inline void sgd_body(std::int64_t i, T* w, const T* grad, S* momentum,
                                         float* master, SgdParams p) {
  float param = master != nullptr ? master[i] : to_f32(w[i]);
  float buf = to_f32(momentum[i]);
  kmath::sgd_update(&param, to_f32(grad[i]), &buf, p);
  momentum[i] = from_f32<S>(buf);
  if (master != nullptr) master[i] = param;
  w[i] = from_f32<T>(param);
}

// The optimizer kernels move N consecutive elements of each array per access (a pack): 16-bit
// weights and gradients in 8-byte, fp32 state and masters in 16-byte loads and stores, where one
// element per access left the H200 at 1.9 of its 4.8 TB/s. Each element's update is the scalar
// body's, on the pack in registers, so the results are the same bits.
inline constexpr int kOptimizerPack = 4;

template <typename T, int N>
struct alignas(sizeof(T) * N) Pack {
  T v[N];
};

template <int N, typename T>
__host__ __device__ inline Pack<T, N> load_pack(const T* p, std::int64_t i) {
  return *reinterpret_cast<const Pack<T, N>*>(p + i);
}
template <int N, typename T>
__host__ __device__ inline void store_pack(T* p, std::int64_t i, const Pack<T, N>& pack) {
  *reinterpret_cast<Pack<T, N>*>(p + i) = pack;
}

// A pack of weights under update: the master's values where there is one (the weight is then
// only written), else the weight's; stored back to both.
template <int N, typename T>
struct WeightPack {
  Pack<T, N> w{};
  Pack<float, N> master{};
  bool has_master = false;
  __host__ __device__ WeightPack(const T* weights, const float* masters, std::int64_t i)
      : has_master(masters != nullptr) {
    if (has_master) {
      master = load_pack<N>(masters, i);
    } else {
      w = load_pack<N>(weights, i);
    }
  }
  __host__ __device__ float* masters() { return has_master ? master.v : nullptr; }
  __host__ __device__ void store(T* weights, float* masters, std::int64_t i) const {
    store_pack(weights, i, w);
    if (has_master) store_pack(masters, i, master);
  }
};

// Elements [i, i + N) by adamw_body.
template <int N, typename T, typename S>
__host__ __device__ inline void adamw_pack_body(std::int64_t i, T* w, const T* grad, S* m, S* v,
                                                float* master, AdamWParams p) {
  WeightPack<N, T> wp(w, master, i);
  const Pack<T, N> gp = load_pack<N>(grad, i);
  Pack<S, N> m1 = load_pack<N>(m, i), v1 = load_pack<N>(v, i);
  for (int k = 0; k < N; ++k) adamw_body(k, wp.w.v, gp.v, m1.v, v1.v, wp.masters(), p);
  wp.store(w, master, i);
  store_pack(m, i, m1);
  store_pack(v, i, v1);
}

// Elements [i, i + N) by sgd_body.
template <int N, typename T, typename S>
__host__ __device__ inline void sgd_pack_body(std::int64_t i, T* w, const T* grad, S* momentum,
                                              float* master, SgdParams p) {
  WeightPack<N, T> wp(w, master, i);
  const Pack<T, N> gp = load_pack<N>(grad, i);
  Pack<S, N> b = load_pack<N>(momentum, i);
  for (int k = 0; k < N; ++k) sgd_body(k, wp.w.v, gp.v, b.v, wp.masters(), p);
  wp.store(w, master, i);
  store_pack(momentum, i, b);
}

// What thread t of `threads` does in an optimizer kernel over n elements: `pack` (the pack body,
// called with the first element of each) on packs t, t + threads, ... of N elements, then
// `element` (the scalar body) on element t of the n % N left over.
template <int N, typename PackF, typename ElementF>
__host__ __device__ inline void optimizer_thread(std::int64_t t, std::int64_t threads,
                                                 std::int64_t n, PackF&& pack,
                                                 ElementF&& element) {
  const std::int64_t packs = n / N;
  for (std::int64_t j = t; j < packs; j += threads) pack(j * N);
  if (t < n - packs * N) element(packs * N + t);
}

// Whether every one of `pointers` (null ones aside) starts a pack of N elements of its type: the
// kernels take packs of kOptimizerPack where they do, single elements where not.
template <int N, typename... P>
bool packs_aligned(const P*... pointers) {
  return ((pointers == nullptr ||
           reinterpret_cast<std::uintptr_t>(pointers) % (sizeof(P) * N) == 0) &&
          ...);
}

// dtype is the weight's (and gradient's) storage; state_dtype that of m and v (momentum): fp32 or
// dtype, anything else throws; master is fp32.
void launch_adamw(DType dtype, DType state_dtype, void* w, const void* grad, void* m, void* v,
                  float* master, AdamWParams params, std::int64_t n, cudaStream_t stream);
void launch_sgd(DType dtype, DType state_dtype, void* w, const void* grad, void* momentum,
                float* master, SgdParams params, std::int64_t n, cudaStream_t stream);

}  // namespace vrambench::cuda
