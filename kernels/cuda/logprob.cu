// Preference training on cuda (cuda/logprob.h): the chunked LM head's tiles, their fold into a
// running log-sum-exp, their gradient, and the DPO and KTO losses, one block per pair or row.
#include <fmt/format.h>

#include <cmath>
#include <stdexcept>

#include "common/preference_math.h"
#include "cuda/check.h"
#include "cuda/gemm.h"
#include "cuda/logprob.h"
#include "cuda/op_table.h"
#include "cuda/reduce.h"

namespace vrambench::cuda {
namespace {

__device__ inline float log_add_exp(float a, float b) {
  const float m = fmaxf(a, b);
  if (m == -INFINITY) return -INFINITY;
  return m + logf(expf(a - m) + expf(b - m));
}

__global__ void logprob_start_kernel(float* logp, float* logz, std::int64_t N) {
  const std::int64_t i = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x;
  if (i >= N) return;
  logp[i] = 0.0f;
  logz[i] = -INFINITY;
}

template <typename T>
__global__ void __launch_bounds__(kRowThreads)
    logprob_fold_kernel(const T* tile, LogprobTile t, const std::int32_t* targets, float* logp,
                        float* logz) {
  __shared__ float scratch[32];
  VB_BLOCK_ROWS(row, t.n) {
    const T* z = tile + row * t.c;
    float m = -INFINITY;
    for (std::int64_t j = threadIdx.x; j < t.c; j += blockDim.x) m = fmaxf(m, to_f32(z[j]));
    m = block_max(m, scratch);
    float s = 0.0f;
    for (std::int64_t j = threadIdx.x; j < t.c; j += blockDim.x) s += expf(to_f32(z[j]) - m);
    s = block_sum(s, scratch);
    if (threadIdx.x == 0) {
      const std::int64_t token = t.t0 + row;
      logz[token] = log_add_exp(logz[token], m + logf(s));
      const std::int64_t local = targets[token] - t.c0;
      if (local >= 0 && local < t.c) logp[token] = to_f32(z[local]);
    }
  }
}

__global__ void logprob_finish_kernel(float* logp, float* logz, std::int64_t N, std::int64_t S) {
  const std::int64_t i = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x;
  if (i >= N) return;
  if (i % S == S - 1) {
    logp[i] = 0.0f;
    logz[i] = 0.0f;
    return;
  }
  logp[i] -= logz[i];
}

template <typename T>
__global__ void __launch_bounds__(kRowThreads)
    logprob_tile_grad_kernel(T* tile, LogprobTile t, const std::int32_t* targets,
                             const float* dlogp, const float* logz) {
  VB_BLOCK_ROWS(row, t.n) {
    const std::int64_t token = t.t0 + row;
    const float g = dlogp[token];
    const float lse = logz[token];
    const std::int64_t local = targets[token] - t.c0;
    T* z = tile + row * t.c;
    for (std::int64_t j = threadIdx.x; j < t.c; j += blockDim.x) {
      const float p = expf(to_f32(z[j]) - lse);
      z[j] = from_f32<T>(g * ((j == local ? 1.0f : 0.0f) - p));
    }
  }
}

template <typename X, typename Y>
__global__ void logprob_convert_kernel(const X* x, Y* y, std::int64_t n, bool add) {
  const std::int64_t i = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x;
  if (i >= n) return;
  const float v = to_f32(x[i]);
  y[i] = from_f32<Y>(add ? to_f32(y[i]) + v : v);
}

// The sum over S positions of row r of `v`, every thread of the block taking part.
__device__ inline float row_sum(const float* v, std::int64_t r, std::int64_t S, float* scratch) {
  float s = 0.0f;
  for (std::int64_t j = threadIdx.x; j < S; j += blockDim.x) s += v[r * S + j];
  return block_sum(s, scratch);
}
// Row r's log-ratio.
__device__ inline float ratio(const PreferenceLaunch& p, std::int64_t r, float* scratch) {
  const float policy = row_sum(p.logp, r, p.S, scratch);
  return policy - row_sum(p.ref, r, p.S, scratch);
}
// KTO's z: max(0, the mean over the K KL rows of their log-ratio); 0 without them.
__device__ inline float kl_estimate(const PreferenceLaunch& p, float* scratch) {
  if (p.kl == nullptr || p.K == 0) return 0.0f;
  float sum = 0.0f;
  for (std::int64_t k = 0; k < p.K; ++k) {
    const float kl = row_sum(p.kl, k, p.S, scratch);
    sum += kl - row_sum(p.ref_kl, k, p.S, scratch);
  }
  return fmaxf(0.0f, sum / static_cast<float>(p.K));
}

// DPO: a block per pair; KTO: a block per row. Each adds its share of the mean into the loss.
__global__ void __launch_bounds__(kRowThreads)
    preference_loss_kernel(PreferenceLaunch p, float* loss) {
  __shared__ float scratch[32];
  const float z = p.dpo ? 0.0f : kl_estimate(p, scratch);
  const std::int64_t pairs = p.R / 2;
  const std::int64_t units = p.dpo ? pairs : p.R;
  VB_BLOCK_ROWS(u, units) {
    double term = 0.0;
    if (p.dpo) {
      const float chosen = ratio(p, u, scratch);
      term = kmath::dpo_pair_loss(chosen - ratio(p, u + pairs, scratch), p.beta);
    } else {
      term = kmath::kto_row_loss(ratio(p, u, scratch), z, p.beta, kmath::kto_desirable(u));
    }
    if (threadIdx.x == 0) atomicAdd(loss, static_cast<float>(term / static_cast<double>(units)));
  }
}

// A block per row: its gradient on every position but the last.
__global__ void __launch_bounds__(kRowThreads)
    preference_loss_bwd_kernel(PreferenceLaunch p, float scale, float* dlogp) {
  __shared__ float scratch[32];
  const float z = p.dpo ? 0.0f : kl_estimate(p, scratch);
  const std::int64_t pairs = p.R / 2;
  VB_BLOCK_ROWS(r, p.R) {
    double g = 0.0;
    if (p.dpo) {
      const bool chosen = r < pairs;
      const std::int64_t pair = chosen ? r : r - pairs;
      const float delta = ratio(p, pair, scratch) - ratio(p, pair + pairs, scratch);
      g = kmath::dpo_pair_grad(delta, p.beta) / static_cast<double>(pairs);
      if (!chosen) g = -g;
    } else {
      g = kmath::kto_row_grad(ratio(p, r, scratch), z, p.beta, kmath::kto_desirable(r)) /
          static_cast<double>(p.R);
    }
    const auto v = static_cast<float>(scale * g);
    for (std::int64_t j = threadIdx.x; j < p.S; j += blockDim.x)
      dlogp[r * p.S + j] = j == p.S - 1 ? 0.0f : v;
  }
}

constexpr int kElementThreads = 256;
unsigned element_grid(std::int64_t n) {
  return static_cast<unsigned>(ceil_div(n > 0 ? n : 1, kElementThreads));
}

}  // namespace

std::vector<LogprobTile> logprob_tiles(std::int64_t R, std::int64_t S, std::int64_t V,
                                       std::int64_t T, std::int64_t C) {
  if (R < 1 || S < 2 || V < 1 || T < 1 || C < 1)
    throw std::invalid_argument(fmt::format(
        "logprob tiles of {} sequences of {} positions x {} columns at [{},{}]", R, S, V, T, C));
  std::vector<LogprobTile> tiles;
  const std::int64_t scored = S - 1;
  for (std::int64_t r = 0; r < R; ++r)
    for (std::int64_t t0 = 0; t0 < scored; t0 += T)
      for (std::int64_t c0 = 0; c0 < V; c0 += C)
        tiles.push_back({r, t0, std::min(T, scored - t0), c0, std::min(C, V - c0)});
  return tiles;
}

void launch_logprob_start(float* logp, float* logz, std::int64_t N, cudaStream_t stream) {
  logprob_start_kernel<<<element_grid(N), kElementThreads, 0, stream>>>(logp, logz, N);
  VB_CHECK_LAUNCH("logprob_start_kernel");
}

void launch_logprob_fold(DType dtype, const void* tile, const LogprobTile& t,
                         const std::int32_t* targets, float* logp, float* logz,
                         cudaStream_t stream) {
  dispatch_float(dtype, [&](auto tag) {
    using T = decltype(tag);
    logprob_fold_kernel<T><<<row_grid(t.n), kRowThreads, 0, stream>>>(static_cast<const T*>(tile),
                                                                      t, targets, logp, logz);
  });
  VB_CHECK_LAUNCH("logprob_fold_kernel");
}

void launch_logprob_finish(float* logp, float* logz, std::int64_t N, std::int64_t S,
                           cudaStream_t stream) {
  logprob_finish_kernel<<<element_grid(N), kElementThreads, 0, stream>>>(logp, logz, N, S);
  VB_CHECK_LAUNCH("logprob_finish_kernel");
}

void launch_logprob_tile_grad(DType dtype, void* tile, const LogprobTile& t,
                              const std::int32_t* targets, const float* dlogp, const float* logz,
                              cudaStream_t stream) {
  dispatch_float(dtype, [&](auto tag) {
    using T = decltype(tag);
    logprob_tile_grad_kernel<T>
        <<<row_grid(t.n), kRowThreads, 0, stream>>>(static_cast<T*>(tile), t, targets, dlogp, logz);
  });
  VB_CHECK_LAUNCH("logprob_tile_grad_kernel");
}

namespace {
void convert(DType x_dtype, const void* x, DType y_dtype, void* y, std::int64_t n, bool add,
             cudaStream_t stream) {
  dispatch_float_pair(x_dtype, y_dtype, [&](auto x_tag, auto y_tag) {
    using X = decltype(x_tag);
    using Y = decltype(y_tag);
    logprob_convert_kernel<X, Y><<<element_grid(n), kElementThreads, 0, stream>>>(
        static_cast<const X*>(x), static_cast<Y*>(y), n, add);
  });
  VB_CHECK_LAUNCH("logprob_convert_kernel");
}
}  // namespace

void launch_logprob_convert(DType x_dtype, const void* x, DType y_dtype, void* y, std::int64_t n,
                            cudaStream_t stream) {
  convert(x_dtype, x, y_dtype, y, n, false, stream);
}

void launch_logprob_accumulate(DType x_dtype, const void* x, DType y_dtype, void* y, std::int64_t n,
                               cudaStream_t stream) {
  convert(x_dtype, x, y_dtype, y, n, true, stream);
}

void launch_preference_loss(const PreferenceLaunch& p, float* loss, cudaStream_t stream) {
  VB_CUDA_CHECK(cudaMemsetAsync(loss, 0, sizeof(float), stream));
  preference_loss_kernel<<<row_grid(p.dpo ? p.R / 2 : p.R), kRowThreads, 0, stream>>>(p, loss);
  VB_CHECK_LAUNCH("preference_loss_kernel");
}

void launch_preference_loss_bwd(const PreferenceLaunch& p, float scale, float* dlogp,
                                cudaStream_t stream) {
  preference_loss_bwd_kernel<<<row_grid(p.R), kRowThreads, 0, stream>>>(p, scale, dlogp);
  VB_CHECK_LAUNCH("preference_loss_bwd_kernel");
}

}  // namespace vrambench::cuda

namespace vrambench {
namespace {

std::byte* bytes_at(void* base, std::int64_t elements, DType dtype) {
  return static_cast<std::byte*>(base) + elements * dtype_size(dtype);
}
const std::byte* bytes_at(const void* base, std::int64_t elements, DType dtype) {
  return static_cast<const std::byte*>(base) + elements * dtype_size(dtype);
}

// What the forward and the backward share: a tile's x rows and w rows in the tile's dtype (cast
// into the held tensors under autocast) and its logits by one GEMM. x holds P positions a row.
struct TileRows {
  const void* x = nullptr;
  const void* w = nullptr;
};
const void* x_rows_of(const LogprobOperands& d, const cuda::LogprobTile& t) {
  return bytes_at(static_cast<const void*>(d.x->data), (t.r * d.P + t.t0) * d.H,
                  d.x->tensor->dtype);
}
TileRows tile_logits(const Operands& a, const LogprobOperands& d, const cuda::LogprobTile& t,
                     const Operand& w, CudaContext& context) {
  const DType x_dtype = d.x->tensor->dtype, tile = d.tile->tensor->dtype;
  TileRows rows{x_rows_of(d, t), bytes_at(w.data, t.c0 * d.H, x_dtype)};
  if (d.x_rows != nullptr) {
    cuda::launch_logprob_convert(x_dtype, rows.x, tile, d.x_rows->data, t.n * d.H,
                                 context.stream());
    cuda::launch_logprob_convert(x_dtype, rows.w, tile, d.w_rows->data, t.c * d.H,
                                 context.stream());
    rows = {d.x_rows->data, d.w_rows->data};
  }
  context.gemm(a, tile, cuda::plan_linear_fwd(t.n, d.H, t.c), rows.w, rows.x, d.tile->data);
  return rows;
}

cuda::PreferenceLaunch preference_launch(const Operands& a) {
  cuda::PreferenceLaunch p;
  const Operand& logp = a.in[0];
  a.require(logp.tensor->shape.size() == 2, "logp must be [R,S]");
  p.R = logp.tensor->shape[0];
  p.S = logp.tensor->shape[1];
  a.require(a.in[1].tensor->elements() == p.R * p.S, "ref must be logp's shape");
  p.logp = a.f32(logp);
  p.ref = a.f32(a.in[1]);
  if (a.in.size() == 4) {
    p.K = a.in[2].tensor->elements() / p.S;
    a.require(a.in[2].tensor->elements() == p.K * p.S && a.in[3].tensor->elements() == p.K * p.S,
              "kl and ref_kl must be [K,S]");
    p.kl = a.f32(a.in[2]);
    p.ref_kl = a.f32(a.in[3]);
  }
  p.beta = a.op.beta;
  p.dpo = a.op.trainer == Trainer::dpo;
  a.require(!p.dpo || p.R % 2 == 0, "dpo's rows are pairs: chosen then rejected");
  return p;
}

}  // namespace

void cuda_run_logprob_fwd(const Operands& a, CudaContext& context) {
  const LogprobOperands d = logprob_operands(a);
  float* logp = a.f32(a.out[0]);
  float* logz = a.f32(a.out[1]);
  const std::int32_t* targets = a.i32(a.in[2]);
  cuda::launch_logprob_start(logp, logz, d.tokens(), context.stream());
  for (const cuda::LogprobTile& t : cuda::logprob_tiles(d.R, d.S, d.V, d.T, d.C)) {
    tile_logits(a, d, t, a.in[1], context);
    const std::int64_t row = t.r * d.S;
    cuda::launch_logprob_fold(d.tile->tensor->dtype, d.tile->data, t, targets + row, logp + row,
                              logz + row, context.stream());
  }
  cuda::launch_logprob_finish(logp, logz, d.tokens(), d.S, context.stream());
  // The copy of each row's first S-1 positions the backward reads.
  if (d.xs != nullptr) {
    const auto element = static_cast<std::size_t>(dtype_size(d.x->tensor->dtype));
    const auto width = static_cast<std::size_t>(d.H) * element;
    VB_CUDA_CHECK(cudaMemcpy2DAsync(
        d.xs->data, width * static_cast<std::size_t>(d.S - 1), d.x->data,
        width * static_cast<std::size_t>(d.S), width * static_cast<std::size_t>(d.S - 1),
        static_cast<std::size_t>(d.R), cudaMemcpyDeviceToDevice, context.stream()));
  }
}

// Per tile: its logits, their gradient in place, then dx += g w and dw += g^T x. In one dtype the
// GEMMs add into dx and dw; under autocast (a tile of another dtype than x) each product goes
// through a held tensor the tile's GEMM no longer needs (dx's through the x rows, dw's through
// the w rows, the x rows cast again between) and is added into dx and dw in theirs.
void cuda_run_logprob_bwd(const Operands& a, CudaContext& context) {
  const LogprobOperands d = logprob_operands(a);
  const Operand& dx = a.out[0];
  const Operand* dw = a.out.size() == 2 ? &a.out[1] : nullptr;
  const DType x_dtype = d.x->tensor->dtype, tile = d.tile->tensor->dtype;
  VB_CUDA_CHECK(
      cudaMemsetAsync(dx.data, 0, static_cast<std::size_t>(dx.tensor->bytes), context.stream()));
  if (dw != nullptr)
    VB_CUDA_CHECK(cudaMemsetAsync(dw->data, 0, static_cast<std::size_t>(dw->tensor->bytes),
                                  context.stream()));
  const std::int32_t* targets = a.i32(a.in[3]);
  for (const cuda::LogprobTile& t : cuda::logprob_tiles(d.R, d.S, d.V, d.T, d.C)) {
    const TileRows rows = tile_logits(a, d, t, a.in[2], context);
    const std::int64_t row = t.r * d.S;
    cuda::launch_logprob_tile_grad(tile, d.tile->data, t, targets + row, a.f32(a.in[0]) + row,
                                   a.f32(a.in[4]) + row, context.stream());
    void* dx_rows = bytes_at(dx.data, (row + t.t0) * d.H, x_dtype);
    void* dw_rows = dw != nullptr ? bytes_at(dw->data, t.c0 * d.H, x_dtype) : nullptr;
    cuda::GemmPlan dx_plan = cuda::plan_linear_bwd_dx(t.n, d.H, t.c);
    const cuda::GemmPlan dw_plan = cuda::plan_linear_bwd_dw(t.n, d.H, t.c, d.x_rows == nullptr);
    if (d.x_rows == nullptr) {
      dx_plan.beta = 1.0f;
      context.gemm(a, tile, dx_plan, rows.w, d.tile->data, dx_rows);
      if (dw_rows != nullptr) context.gemm(a, tile, dw_plan, rows.x, d.tile->data, dw_rows);
      continue;
    }
    context.gemm(a, tile, dx_plan, rows.w, d.tile->data, d.x_rows->data);
    cuda::launch_logprob_accumulate(tile, d.x_rows->data, x_dtype, dx_rows, t.n * d.H,
                                    context.stream());
    if (dw_rows == nullptr) continue;
    cuda::launch_logprob_convert(x_dtype, x_rows_of(d, t), tile, d.x_rows->data, t.n * d.H,
                                 context.stream());
    context.gemm(a, tile, dw_plan, d.x_rows->data, d.tile->data, d.w_rows->data);
    cuda::launch_logprob_accumulate(tile, d.w_rows->data, x_dtype, dw_rows, t.c * d.H,
                                    context.stream());
  }
}

void cuda_run_preference_loss(const Operands& a, CudaContext& context) {
  cuda::launch_preference_loss(preference_launch(a), a.f32(a.out[0]), context.stream());
}

void cuda_run_preference_loss_bwd(const Operands& a, CudaContext& context) {
  cuda::launch_preference_loss_bwd(preference_launch(a), a.op.grad_scale, a.f32(a.out[0]),
                                   context.stream());
}

}  // namespace vrambench
