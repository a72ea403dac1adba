// Speed of the main CUDA kernels (GEMM, layernorm, softmax, fused attention, AdamW), timed with
// CUDA events as manual time. Without a GPU every benchmark reports why and skips.
#include <benchmark/benchmark.h>
#include <cuda_runtime.h>

#include <string>

#include "cuda/attention.h"
#include "cuda/attention_flash.h"
#include "cuda/check.h"
#include "cuda/gemm.h"
#include "cuda/layernorm.h"
#include "cuda/optimizer.h"
#include "cuda/owners.h"
#include "device/cuda_device.h"

namespace vrambench::cuda {
namespace {

bool skip_without_gpu(benchmark::State& state) {
  std::string why;
  if (cuda_available(&why)) return false;
  state.SkipWithError(("needs a GPU: " + why).c_str());
  return true;
}

// Times `launch` on `stream` with events, one iteration per benchmark iteration.
template <typename F>
void time_with_events(benchmark::State& state, cudaStream_t stream, F&& launch) {
  Event start = make_event(), stop = make_event();
  launch();  // warm-up (heuristics, caches)
  VB_CUDA_CHECK(cudaStreamSynchronize(stream));
  for (auto _ : state) {
    VB_CUDA_CHECK(cudaEventRecord(start.get(), stream));
    launch();
    VB_CUDA_CHECK(cudaEventRecord(stop.get(), stream));
    VB_CUDA_CHECK(cudaEventSynchronize(stop.get()));
    float ms = 0.0f;
    VB_CUDA_CHECK(cudaEventElapsedTime(&ms, start.get(), stop.get()));
    state.SetIterationTime(static_cast<double>(ms) / 1e3);
  }
}

DType dtype_arg(std::int64_t v) {
  return v == 0 ? DType::f32 : (v == 1 ? DType::f16 : DType::bf16);
}
GemmMath math_arg(std::int64_t v) {
  return v == 0 ? GemmMath::fp32 : (v == 1 ? GemmMath::fp16 : GemmMath::bf16);
}

// linear_fwd: y[M, Out] = x[M, In] w^T. Args: M, In, Out, dtype (0 f32, 1 f16, 2 bf16).
void BM_LinearForward(benchmark::State& state) {
  if (skip_without_gpu(state)) return;
  const std::int64_t M = state.range(0), In = state.range(1), Out = state.range(2);
  const GemmMath math = math_arg(state.range(3));
  const auto es = static_cast<std::size_t>(dtype_size(gemm_storage(math)));
  Stream stream = make_stream();
  DeviceBuffer x(es * static_cast<std::size_t>(M * In)), w(es * static_cast<std::size_t>(Out * In)),
      y(es * static_cast<std::size_t>(M * Out));
  CudaDeviceInfo info = query_cuda_device(0);
  const Bytes ws_bytes = gemm_workspace_bytes(info.compute_capability());
  DeviceBuffer ws(static_cast<std::size_t>(ws_bytes));
  GemmRunner runner;
  const GemmPlan plan = plan_linear_fwd(M, In, Out);
  time_with_events(state, stream.get(), [&] {
    runner.run(plan, math, w.get(), x.get(), y.get(), nullptr, ws.get(), ws_bytes, stream.get());
  });
  state.counters["TFLOP/s"] = benchmark::Counter(2.0 * double(M) * double(In) * double(Out),
                                                 benchmark::Counter::kIsIterationInvariantRate,
                                                 benchmark::Counter::kIs1000);
}
BENCHMARK(BM_LinearForward)
    ->Args({8192, 768, 3072, 2})
    ->Args({8192, 4096, 4096, 2})
    ->Args({8192, 4096, 4096, 0})
    ->UseManualTime()
    ->Unit(benchmark::kMicrosecond);

// layernorm_fwd over [M, H]. Args: M, H, dtype.
void BM_LayerNormForward(benchmark::State& state) {
  if (skip_without_gpu(state)) return;
  const std::int64_t M = state.range(0), H = state.range(1);
  const DType dt = dtype_arg(state.range(2));
  const auto es = static_cast<std::size_t>(dtype_size(dt));
  Stream stream = make_stream();
  DeviceBuffer x(es * static_cast<std::size_t>(M * H)), y(es * static_cast<std::size_t>(M * H)),
      w(es * static_cast<std::size_t>(H)), b(es * static_cast<std::size_t>(H)),
      mean(4 * static_cast<std::size_t>(M)), rstd(4 * static_cast<std::size_t>(M));
  VB_CUDA_CHECK(cudaMemset(x.get(), 0, x.bytes()));
  time_with_events(state, stream.get(), [&] {
    launch_layernorm_fwd(dt, y.get(), mean.as<float>(), rstd.as<float>(), x.get(), w.get(), b.get(),
                         M, H, 1e-5f, stream.get());
  });
  state.SetBytesProcessed(state.iterations() * static_cast<std::int64_t>(2 * es) * M * H);
}
BENCHMARK(BM_LayerNormForward)
    ->Args({8192, 768, 2})
    ->Args({8192, 4096, 2})
    ->UseManualTime()
    ->Unit(benchmark::kMicrosecond);

// softmax_fwd over attention scores [B*A*S, S]. Args: rows, S, dtype.
void BM_SoftmaxForward(benchmark::State& state) {
  if (skip_without_gpu(state)) return;
  const std::int64_t rows = state.range(0), S = state.range(1);
  const DType dt = dtype_arg(state.range(2));
  const auto es = static_cast<std::size_t>(dtype_size(dt));
  Stream stream = make_stream();
  DeviceBuffer s(es * static_cast<std::size_t>(rows * S)),
      p(es * static_cast<std::size_t>(rows * S));
  VB_CUDA_CHECK(cudaMemset(s.get(), 0, s.bytes()));
  time_with_events(state, stream.get(),
                   [&] { launch_softmax_fwd(dt, p.get(), dt, s.get(), rows, S, stream.get()); });
  state.SetBytesProcessed(state.iterations() * static_cast<std::int64_t>(2 * es) * rows * S);
}
BENCHMARK(BM_SoftmaxForward)
    ->Args({4 * 12 * 1024, 1024, 2})
    ->UseManualTime()
    ->Unit(benchmark::kMicrosecond);

// Fused causal attention over qkv[B, S, (A + 2K) D]. Args: B, S, A, K, D, dtype. The counter is
// the useful (causal) work: 2 B A D S (S + 1) flops forward (q k^T and p v), 2.5 times that
// backward (the scores again, dP, dV, dK, dQ). Inputs are a constant fill: timing does not depend
// on the values.
struct FlashBenchBuffers {
  FlashBenchBuffers(const FlashShape& f, DType dt)
      : es(static_cast<std::size_t>(dtype_size(dt))),
        qkv(es * static_cast<std::size_t>(f.batch * f.seq * f.width())),
        dqkv(qkv.bytes()),
        y(es * static_cast<std::size_t>(f.batch * f.seq * f.heads * f.head_dim)),
        dy(y.bytes()),
        lse(4 * static_cast<std::size_t>(f.batch * f.heads * f.seq)),
        scratch(static_cast<std::size_t>(flash_bwd_scratch_bytes(f))) {
    VB_CUDA_CHECK(cudaMemset(qkv.get(), 0x3c, qkv.bytes()));  // 0.0115 in f32 and bf16, 1.06 in f16
    VB_CUDA_CHECK(cudaMemset(dy.get(), 0x3c, dy.bytes()));
  }
  std::size_t es;
  DeviceBuffer qkv, dqkv, y, dy, lse, scratch;
};
FlashShape flash_bench_shape(const benchmark::State& state) {
  return FlashShape{
      state.range(0), state.range(1), state.range(2), state.range(3), state.range(4), 0.0f, 1};
}
double flash_forward_flops(const FlashShape& f) {
  return 2.0 * double(f.batch) * double(f.heads) * double(f.head_dim) * double(f.seq) *
         double(f.seq + 1);
}

void BM_FlashForward(benchmark::State& state) {
  if (skip_without_gpu(state)) return;
  const FlashShape f = flash_bench_shape(state);
  const DType dt = dtype_arg(state.range(5));
  Stream stream = make_stream();
  FlashBenchBuffers b(f, dt);
  time_with_events(state, stream.get(), [&] {
    launch_flash_fwd(dt, b.y.get(), b.lse.as<float>(), b.qkv.get(), f, stream.get());
  });
  state.counters["TFLOP/s"] =
      benchmark::Counter(flash_forward_flops(f), benchmark::Counter::kIsIterationInvariantRate,
                         benchmark::Counter::kIs1000);
}
BENCHMARK(BM_FlashForward)
    ->Args({8, 1024, 12, 12, 64, 2})  // gpt2, bf16
    ->Args({8, 1024, 12, 12, 64, 0})  // gpt2, fp32 (the fp32/tf32 recipes)
    ->Args({1, 2048, 32, 8, 128, 2})  // llama-like grouped-query heads
    ->UseManualTime()
    ->Unit(benchmark::kMillisecond);

void BM_FlashBackward(benchmark::State& state) {
  if (skip_without_gpu(state)) return;
  const FlashShape f = flash_bench_shape(state);
  const DType dt = dtype_arg(state.range(5));
  Stream stream = make_stream();
  FlashBenchBuffers b(f, dt);
  launch_flash_fwd(dt, b.y.get(), b.lse.as<float>(), b.qkv.get(), f, stream.get());
  time_with_events(state, stream.get(), [&] {
    launch_flash_bwd(dt, b.dqkv.get(), b.scratch.get(), static_cast<Bytes>(b.scratch.bytes()),
                     b.dy.get(), b.qkv.get(), b.y.get(), b.lse.as<float>(), f, stream.get());
  });
  state.counters["TFLOP/s"] = benchmark::Counter(2.5 * flash_forward_flops(f),
                                                 benchmark::Counter::kIsIterationInvariantRate,
                                                 benchmark::Counter::kIs1000);
}
BENCHMARK(BM_FlashBackward)
    ->Args({8, 1024, 12, 12, 64, 2})
    ->Args({8, 1024, 12, 12, 64, 0})
    ->Args({1, 2048, 32, 8, 128, 2})
    ->UseManualTime()
    ->Unit(benchmark::kMillisecond);

// adamw over n bf16 weights with fp32 master weights and state.
void BM_AdamW(benchmark::State& state) {
  if (skip_without_gpu(state)) return;
  const std::int64_t n = state.range(0);
  Stream stream = make_stream();
  const auto un = static_cast<std::size_t>(n);
  DeviceBuffer w(2 * un), g(2 * un), m(4 * un), v(4 * un), master(4 * un);
  VB_CUDA_CHECK(cudaMemset(g.get(), 0, g.bytes()));
  VB_CUDA_CHECK(cudaMemset(m.get(), 0, m.bytes()));
  VB_CUDA_CHECK(cudaMemset(v.get(), 0, v.bytes()));
  VB_CUDA_CHECK(cudaMemset(master.get(), 0, master.bytes()));
  time_with_events(state, stream.get(), [&] {
    launch_adamw(DType::bf16, DType::f32, w.get(), g.get(), m.get(), v.get(), master.as<float>(),
                 AdamWParams{}, n, stream.get());
  });
  state.SetBytesProcessed(state.iterations() * n * (2 + 2 + 3 * 4 * 2));
}
BENCHMARK(BM_AdamW)->Arg(124 << 20)->UseManualTime()->Unit(benchmark::kMicrosecond);

}  // namespace
}  // namespace vrambench::cuda
