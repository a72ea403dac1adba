// CUDA availability, device and library information, and the cudaMalloc and stream-ordered
// (cudaMallocAsync pool) segment sources.
#include "device/cuda_device.h"

#include <cublasLt.h>
#include <cuda_runtime.h>
#include <cudnn.h>
#include <fmt/format.h>

#include <optional>
#include <stdexcept>

#include "cuda/check.h"
#include "cuda/gemm.h"
#include "cuda/owners.h"

namespace vrambench {

bool cuda_available(std::string* why) {
  int count = 0;
  const cudaError_t e = cudaGetDeviceCount(&count);
  if (e != cudaSuccess) {
    (void)cudaGetLastError();  // not sticky, but leave no error behind
    if (why != nullptr)
      *why = fmt::format("no usable CUDA driver or device: {} ({})", cudaGetErrorName(e),
                         cudaGetErrorString(e));
    return false;
  }
  if (count == 0) {
    if (why != nullptr) *why = "no CUDA device";
    return false;
  }
  return true;
}

CudaLibraryVersions cuda_library_versions() {
  CudaLibraryVersions v;
  if (cudaRuntimeGetVersion(&v.runtime) != cudaSuccess) v.runtime = 0;
  v.cublaslt = cublasLtGetVersion();
  v.cudnn = cudnnGetVersion();
  return v;
}

CudaDeviceInfo query_cuda_device(int ordinal) {
  std::string why;
  if (!cuda_available(&why)) throw NeedsGpu(why);
  CudaDeviceInfo info;
  info.ordinal = ordinal;
  info.libraries = cuda_library_versions();
  cudaDeviceProp prop{};
  VB_CUDA_CHECK(cudaGetDeviceProperties(&prop, ordinal));
  info.name = prop.name;
  info.cc_major = prop.major;
  info.cc_minor = prop.minor;
  VB_CUDA_CHECK(cudaSetDevice(ordinal));
  std::size_t free_bytes = 0, total_bytes = 0;
  VB_CUDA_CHECK(cudaMemGetInfo(&free_bytes, &total_bytes));
  info.free_memory = static_cast<Bytes>(free_bytes);
  info.total_memory = static_cast<Bytes>(total_bytes);
  VB_CUDA_CHECK(cudaDriverGetVersion(&info.driver_version));
  return info;
}

std::vector<CudaDeviceInfo> query_cuda_devices() {
  std::vector<CudaDeviceInfo> out;
  if (!cuda_available()) return out;
  int count = 0;
  VB_CUDA_CHECK(cudaGetDeviceCount(&count));
  for (int i = 0; i < count; ++i) out.push_back(query_cuda_device(i));
  return out;
}

DeviceInfo resolve_cuda_device(const RunConfig& cfg, int ordinal) {
  CudaDeviceInfo info = query_cuda_device(ordinal);
  // The handles every trial holds: their memory is part of what the step cannot use.
  const cuda::CublasLtHandle cublas = cuda::make_cublaslt_handle();
  const cuda::CudnnHandle cudnn = cuda::make_cudnn_handle();
  std::size_t free_bytes = 0, total_bytes = 0;
  VB_CUDA_CHECK(cudaMemGetInfo(&free_bytes, &total_bytes));
  DeviceInfo spec;
  spec.kind = DeviceKind::cuda;
  spec.label =
      fmt::format("cuda:{} {} (cc {}.{})", ordinal, info.name, info.cc_major, info.cc_minor);
  spec.total = cfg.vram > 0 ? cfg.vram : static_cast<Bytes>(total_bytes);
  spec.fixed_overhead = static_cast<Bytes>(total_bytes - free_bytes);
  spec.gemm_workspace = cuda::gemm_workspace_bytes(info.compute_capability());
  return spec;
}

namespace {

// total - free as the driver sees it: every context, library and allocation on the device.
std::optional<Bytes> driver_used() {
  std::size_t free_bytes = 0, total_bytes = 0;
  if (cudaMemGetInfo(&free_bytes, &total_bytes) != cudaSuccess) {
    (void)cudaGetLastError();
    return std::nullopt;
  }
  return static_cast<Bytes>(total_bytes - free_bytes);
}

class CudaSource final : public SegmentSource {
 public:
  CudaSource(Bytes capacity, bool managed) : capacity_(capacity), managed_(managed) {}
  ~CudaSource() override = default;  // the allocator returns every segment before it goes

  std::optional<std::uintptr_t> allocate_segment(Bytes bytes) override {
    if (bytes <= 0 || in_use_ + bytes > capacity_) return std::nullopt;
    void* p = nullptr;
    const cudaError_t e = managed_
                              ? cudaMallocManaged(&p, static_cast<std::size_t>(bytes))
                              : cudaMalloc(&p, static_cast<std::size_t>(bytes));
    if (e == cudaErrorMemoryAllocation) {
      (void)cudaGetLastError();  // clear it: running out is a result, the next trial goes on
      return std::nullopt;
    }
    VB_CUDA_CHECK(e);
    in_use_ += bytes;
    return reinterpret_cast<std::uintptr_t>(p);
  }

  void free_segment(std::uintptr_t address, Bytes bytes) override {
    VB_CUDA_CHECK(cudaFree(reinterpret_cast<void*>(address)));
    in_use_ -= bytes;
  }

  Bytes capacity() const override { return capacity_; }
  Bytes in_use() const override { return in_use_; }
  std::optional<Bytes> device_used() const override { return driver_used(); }

 private:
  Bytes capacity_;
  bool managed_;
  Bytes in_use_ = 0;
};

// Segments from a dedicated memory pool, stream-ordered on a stream of its own; see
// make_cuda_async_source in the header for why every call synchronises and why the release
// threshold is 0.
class CudaAsyncSource final : public SegmentSource {
 public:
  explicit CudaAsyncSource(Bytes capacity) : capacity_(capacity) {
    int device = 0;
    VB_CUDA_CHECK(cudaGetDevice(&device));
    cudaMemPoolProps props{};
    props.allocType = cudaMemAllocationTypePinned;
    props.handleTypes = cudaMemHandleTypeNone;
    props.location.type = cudaMemLocationTypeDevice;
    props.location.id = device;
    VB_CUDA_CHECK(cudaMemPoolCreate(&pool_, &props));
    try {
      std::uint64_t threshold = 0;  // keep nothing once freed: no cache under the allocator
      VB_CUDA_CHECK(cudaMemPoolSetAttribute(pool_, cudaMemPoolAttrReleaseThreshold, &threshold));
      VB_CUDA_CHECK(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking));
    } catch (...) {
      (void)cudaMemPoolDestroy(pool_);
      throw;
    }
  }
  // The allocator returns every segment before it goes; whatever is left is released with the
  // pool once its frees complete.
  ~CudaAsyncSource() override {
    (void)cudaStreamSynchronize(stream_);
    (void)cudaStreamDestroy(stream_);
    (void)cudaMemPoolDestroy(pool_);
  }
  CudaAsyncSource(const CudaAsyncSource&) = delete;
  CudaAsyncSource& operator=(const CudaAsyncSource&) = delete;

  std::optional<std::uintptr_t> allocate_segment(Bytes bytes) override {
    if (bytes <= 0 || in_use_ + bytes > capacity_) return std::nullopt;
    void* p = nullptr;
    cudaError_t e = cudaMallocFromPoolAsync(&p, static_cast<std::size_t>(bytes), pool_, stream_);
    // The pool may report a refusal at the call or only when the stream reaches the allocation:
    // wait for it, so that the answer (and the memory) is there when this returns.
    if (e == cudaSuccess) e = cudaStreamSynchronize(stream_);
    if (e == cudaErrorMemoryAllocation) {
      (void)cudaGetLastError();  // clear it: running out is a result, the next trial goes on
      if (p != nullptr) {
        (void)cudaFreeAsync(p, stream_);
        (void)cudaStreamSynchronize(stream_);
        (void)cudaGetLastError();
      }
      return std::nullopt;
    }
    VB_CUDA_CHECK(e);
    in_use_ += bytes;
    return reinterpret_cast<std::uintptr_t>(p);
  }

  void free_segment(std::uintptr_t address, Bytes bytes) override {
    // Kernels on any stream (the executor has its own) may still use the segment: wait for the
    // device as cudaFree does, free on this stream, wait for the free, and give the memory back.
    VB_CUDA_CHECK(cudaDeviceSynchronize());
    VB_CUDA_CHECK(cudaFreeAsync(reinterpret_cast<void*>(address), stream_));
    VB_CUDA_CHECK(cudaStreamSynchronize(stream_));
    VB_CUDA_CHECK(cudaMemPoolTrimTo(pool_, 0));
    in_use_ -= bytes;
  }

  Bytes capacity() const override { return capacity_; }
  Bytes in_use() const override { return in_use_; }
  std::optional<Bytes> device_used() const override { return driver_used(); }

  CudaPoolWatermarks watermarks() const {
    CudaPoolWatermarks w;
    w.reserved_high = attribute(cudaMemPoolAttrReservedMemHigh);
    w.used_high = attribute(cudaMemPoolAttrUsedMemHigh);
    w.reserved_current = attribute(cudaMemPoolAttrReservedMemCurrent);
    w.used_current = attribute(cudaMemPoolAttrUsedMemCurrent);
    return w;
  }

  void reset_watermarks() {
    std::uint64_t zero = 0;  // the only value these attributes may be set to
    VB_CUDA_CHECK(cudaMemPoolSetAttribute(pool_, cudaMemPoolAttrReservedMemHigh, &zero));
    VB_CUDA_CHECK(cudaMemPoolSetAttribute(pool_, cudaMemPoolAttrUsedMemHigh, &zero));
  }

 private:
  Bytes attribute(cudaMemPoolAttr attr) const {
    std::uint64_t value = 0;
    VB_CUDA_CHECK(cudaMemPoolGetAttribute(pool_, attr, &value));
    return static_cast<Bytes>(value);
  }

  Bytes capacity_;
  Bytes in_use_ = 0;
  cudaMemPool_t pool_ = nullptr;
  cudaStream_t stream_ = nullptr;
};

[[noreturn]] void throw_not_async_source() {
  throw std::invalid_argument("pool watermarks: the source is not from make_cuda_async_source");
}

}  // namespace

std::unique_ptr<SegmentSource> make_cuda_source(Bytes capacity) {
  std::string why;
  if (!cuda_available(&why)) throw NeedsGpu(why);
  return std::make_unique<CudaSource>(capacity, false);
}

std::unique_ptr<SegmentSource> make_cuda_managed_source(Bytes capacity) {
  std::string why;
  if (!cuda_available(&why)) throw NeedsGpu(why);
  return std::make_unique<CudaSource>(capacity, true);
}

std::unique_ptr<SegmentSource> make_cuda_async_source(Bytes capacity) {
  std::string why;
  if (!cuda_available(&why)) throw NeedsGpu(why);
  return std::make_unique<CudaAsyncSource>(capacity);
}

CudaPoolWatermarks cuda_pool_watermarks(const SegmentSource& source) {
  const auto* async = dynamic_cast<const CudaAsyncSource*>(&source);
  if (async == nullptr) throw_not_async_source();
  return async->watermarks();
}

void reset_cuda_pool_watermarks(SegmentSource& source) {
  auto* async = dynamic_cast<CudaAsyncSource*>(&source);
  if (async == nullptr) throw_not_async_source();
  async->reset_watermarks();
}

}  // namespace vrambench
