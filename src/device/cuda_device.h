// The cuda device's parts: availability (without a driver this says why instead of failing), what
// the GPU and its libraries are, cudaMalloc segments capped at a capacity, the executor that runs
// every op of a Program with the kernels in kernels/cuda, and a selftest of those kernels against
// the CPU reference. Defined only in builds with CUDA; device/factory.cpp puts them together into a
// Device. This header includes no CUDA header.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "alloc/allocator.h"
#include "config/run_config.h"
#include "core/dtype.h"
#include "core/error.h"
#include "core/units.h"
#include "device/device.h"
#include "device/executor.h"
#include "device/gpu.h"

namespace vrambench {

// True when at least one CUDA device can be used; otherwise false and *why (when given) says why
// ("no CUDA driver: cudaErrorInsufficientDriver (...)", "no CUDA device").
bool cuda_available(std::string* why = nullptr);

CudaLibraryVersions cuda_library_versions();

// Queries device `ordinal`; throws NeedsGpu when cuda_available() is false.
CudaDeviceInfo query_cuda_device(int ordinal = 0);

// Every device the driver shows.
std::vector<CudaDeviceInfo> query_cuda_devices();

// The cuda DeviceInfo of a run: label "cuda:0 NVIDIA H100 80GB HBM3 (cc 9.0)", total = the card's
// memory (or cfg.vram to emulate a smaller card), fixed_overhead = what the CUDA context and the
// cuBLASLt and cuDNN handles hold (total - free once they exist; this creates a context in the
// calling process), gemm_workspace = cuda::gemm_workspace_bytes(cc). Throws NeedsGpu without one.
DeviceInfo resolve_cuda_device(const RunConfig& cfg, int ordinal = 0);

// cudaMalloc segments, refusing (nullopt) above `capacity` or when the device is out of memory
// (the error is cleared, so the next trial starts clean). Other CUDA errors throw CudaError.
// Throws NeedsGpu without a device.
std::unique_ptr<SegmentSource> make_cuda_source(Bytes capacity);

// cudaMallocManaged segments (paged optimizer state): the driver migrates them between host and
// device on demand, so they do not count against the card; `capacity` caps them all the same.
std::unique_ptr<SegmentSource> make_cuda_managed_source(Bytes capacity);

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

// Runs every OpKind on the GPU; an allocation failure inside a library throws DeviceOutOfMemory,
// any other CUDA failure cuda::CudaError (a std::runtime_error). Initial contents follow
// device/init_rule.h, filled on the GPU: with the same seed, cpu and cuda start a step from the
// same values. Throws NeedsGpu without a device.
std::unique_ptr<Executor> make_cuda_executor(std::uint64_t seed,
                                             FlashImpl flash = FlashImpl::kernels);

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
