// The cuda device: availability (without a driver this says why instead of failing), what the GPU
// and its libraries are, cudaMalloc segments capped at a capacity, the executor that runs every op
// of a Program with the kernels in kernels/cuda, and a selftest of those kernels against the CPU
// reference. This header includes no CUDA header, so the CLI can use it.
#pragma once

#include <cstdint>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include "alloc/allocator.h"
#include "core/config.h"
#include "core/dtype.h"
#include "core/error.h"
#include "core/units.h"
#include "device/device.h"
#include "device/executor.h"

namespace vrambench {

// A GPU is required for what was asked and there is none; what() starts with "needs a GPU: ".
class NeedsGpu : public std::runtime_error {
 public:
  explicit NeedsGpu(const std::string& reason) : std::runtime_error("needs a GPU: " + reason) {}
};

// True when at least one CUDA device can be used; otherwise false and *why (when given) says why
// ("no CUDA driver: cudaErrorInsufficientDriver (...)", "no CUDA device").
bool cuda_available(std::string* why = nullptr);

// Versions that are known without a GPU: the CUDA runtime linked, cuBLASLt and cuDNN.
struct CudaLibraryVersions {
  int runtime = 0;                   // CUDART_VERSION style: 13000 = 13.0
  std::size_t cublaslt = 0;          // cublasLtGetVersion(): 130000 style
  std::size_t cudnn = 0;             // cudnnGetVersion(): 91900 = 9.19.0
  std::string runtime_text() const;  // "13.0"
  std::string cublaslt_text() const;
  std::string cudnn_text() const;
};
CudaLibraryVersions cuda_library_versions();

struct CudaDeviceInfo {
  int ordinal = 0;
  std::string name;
  Bytes total_memory = 0;
  Bytes free_memory = 0;
  int cc_major = 0, cc_minor = 0;
  int driver_version = 0;  // cudaDriverGetVersion
  CudaLibraryVersions libraries;
  int compute_capability() const { return cc_major * 10 + cc_minor; }  // 90 for 9.0
};
// Queries device `ordinal`; throws NeedsGpu when cuda_available() is false.
CudaDeviceInfo query_cuda_device(int ordinal = 0);

// The cuda DeviceSpec of a run: label "cuda:0 NVIDIA H100 80GB HBM3 (cc 9.0)", total = the card's
// memory (or cfg.vram to emulate a smaller card), fixed_overhead = what the CUDA context and the
// cuBLASLt and cuDNN handles hold (total - free once they exist; this creates a context in the
// calling process), gemm_workspace = cuda::gemm_workspace_bytes(cc). Throws NeedsGpu without one.
DeviceSpec resolve_cuda_device(const RunConfig& cfg, int ordinal = 0);

// cudaMalloc segments, refusing (nullopt) above `capacity` or when the device is out of memory
// (the error is cleared, so the next trial starts clean). Other CUDA errors throw CudaError.
// Throws NeedsGpu without a device.
std::unique_ptr<SegmentSource> make_cuda_source(Bytes capacity);

// Stream-ordered segments: cudaMallocFromPoolAsync / cudaFreeAsync on a memory pool of its own
// (created on the current device, not the device's default pool) and a stream of its own. Every
// call synchronises before it returns, so a segment is ready for any stream when it is handed out,
// a refusal is reported at the call (nullopt, the error cleared, like make_cuda_source), and a
// segment is freed only after every stream has finished with it (as cudaFree does).
// The pool's release threshold is 0 and it is trimmed after each free: the allocator above it
// (direct or caching) is what a trial measures, so the pool must not keep freed memory as a second
// cache under it; that way the direct policy keeps raw cudaMalloc semantics, and memory a trial
// gave back is back with the driver before the next trial, where cudaMemGetInfo and a new source
// see it. `capacity` caps what the source hands out, as for make_cuda_source; the pool itself
// has no cap of its own. Other CUDA errors throw CudaError. Throws NeedsGpu without a device.
std::unique_ptr<SegmentSource> make_cuda_async_source(Bytes capacity);

// The high-watermarks of the pool behind a make_cuda_async_source source (cudaMemPoolAttr*):
// `reserved` is what the pool held from the driver, `used` what it had handed out (segment sizes
// as the pool rounds them); `*_high` are the peaks since the pool was created or last reset.
struct CudaPoolWatermarks {
  Bytes reserved_high = 0;     // cudaMemPoolAttrReservedMemHigh
  Bytes used_high = 0;         // cudaMemPoolAttrUsedMemHigh
  Bytes reserved_current = 0;  // cudaMemPoolAttrReservedMemCurrent
  Bytes used_current = 0;      // cudaMemPoolAttrUsedMemCurrent
};
// Both throw std::invalid_argument when `source` is not from make_cuda_async_source.
CudaPoolWatermarks cuda_pool_watermarks(const SegmentSource& source);
// Resets both high-watermarks to the pool's current values (the attributes set to 0).
void reset_cuda_pool_watermarks(SegmentSource& source);

// How flash_fwd and flash_bwd run: the plain fused kernels of kernels/cuda/flash.cu (every dtype,
// dropout masks identical to the CPU reference), or cuDNN's fused attention through its frontend
// (kernels/cuda/flash_cudnn.h: 16-bit storage, dropout from cuDNN's own generator, the op's scratch
// as its workspace). cudnn never falls back to the kernels: where cuDNN cannot run an op (fp32,
// a shape it rejects, too little listed workspace) the op fails with cuDNN's message.
// automatic: cudnn for 16-bit storage, kernels for fp32/tf32 (cuDNN has no fp32 attention
// backward), chosen from the recipe before anything runs, never after a failure.
enum class FlashImpl { kernels, cudnn, automatic };
// What `impl` runs flash attention with for activations stored as `storage`: kernels or cudnn.
FlashImpl resolve_flash_impl(FlashImpl impl, DType storage);
// "auto" / "cudnn" / "kernels"; throws std::invalid_argument naming the value and the choices.
FlashImpl parse_flash_impl(const std::string& text);

// Runs every OpKind on the GPU; an allocation failure inside a library throws DeviceOutOfMemory,
// any other CUDA failure cuda::CudaError (a std::runtime_error). Initial contents are those of the
// cpu executor with the same seed (computed on the host, then copied), so cpu and cuda start a step
// from the same values. Throws NeedsGpu without a device.
std::unique_ptr<Executor> make_cuda_executor(std::uint64_t seed,
                                             FlashImpl flash = FlashImpl::kernels);

// One op kind at one storage type, run on the GPU and on the CPU reference with the same inputs.
struct SelftestRow {
  std::string config;  // which small program it ran in ("gpt fp32 eager", ...)
  std::string op;      // op kind
  DType dtype = DType::f32;
  std::int64_t ops = 0;      // how many ops of this kind ran
  double max_abs_error = 0;  // largest |gpu - cpu| over every output element
  double worst_ratio = 0;    // largest |gpu - cpu| / (atol + rtol |cpu|); <= 1 passes
  bool passed = false;
  std::string note;  // e.g. why an op was not compared
};
// The small programs the selftest runs: together they use every op kind at every storage type.
struct SelftestConfig {
  std::string label;
  RunConfig cfg;
  FlashImpl flash = FlashImpl::kernels;
};
std::vector<SelftestConfig> selftest_configs();

// Runs small gpt and llama programs (eager and flash, fp32/tf32/fp16/bf16) op by op on the GPU and
// the CPU, feeding both the same inputs before each op. Throws NeedsGpu without a device.
std::vector<SelftestRow> run_cuda_selftest();

}  // namespace vrambench
