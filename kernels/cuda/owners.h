// Move-only owners of CUDA objects: device buffers, streams, events, cuBLASLt handle, matmul
// descriptors and layouts, cuDNN handle and backend descriptors. Each frees what it holds exactly
// once; destructors never throw (a failed destroy during unwinding has nowhere to go).
#pragma once

#include <cublasLt.h>
#include <cuda_runtime.h>
#include <cudnn.h>

#include <cstddef>
#include <utility>

#include "cuda/check.h"

namespace vrambench::cuda {

// Holds one handle of type H and destroys it with Destroy::operator()(H).
template <typename H, typename Destroy>
class Owner {
 public:
  Owner() = default;
  explicit Owner(H handle) : handle_(handle) {}
  Owner(const Owner&) = delete;
  Owner& operator=(const Owner&) = delete;
  Owner(Owner&& other) noexcept : handle_(std::exchange(other.handle_, H{})) {}
  Owner& operator=(Owner&& other) noexcept {
    if (this != &other) {
      reset();
      handle_ = std::exchange(other.handle_, H{});
    }
    return *this;
  }
  ~Owner() { reset(); }

  H get() const { return handle_; }
  explicit operator bool() const { return handle_ != H{}; }
  void reset() {
    if (handle_ != H{}) Destroy{}(handle_);
    handle_ = H{};
  }
  H release() { return std::exchange(handle_, H{}); }

 private:
  H handle_{};
};

struct DestroyStream {
  void operator()(cudaStream_t s) const noexcept { (void)cudaStreamDestroy(s); }
};
struct DestroyEvent {
  void operator()(cudaEvent_t e) const noexcept { (void)cudaEventDestroy(e); }
};
struct DestroyCublasLt {
  void operator()(cublasLtHandle_t h) const noexcept { (void)cublasLtDestroy(h); }
};
struct DestroyMatmulDesc {
  void operator()(cublasLtMatmulDesc_t d) const noexcept { (void)cublasLtMatmulDescDestroy(d); }
};
struct DestroyMatrixLayout {
  void operator()(cublasLtMatrixLayout_t l) const noexcept { (void)cublasLtMatrixLayoutDestroy(l); }
};
struct DestroyMatmulPreference {
  void operator()(cublasLtMatmulPreference_t p) const noexcept {
    (void)cublasLtMatmulPreferenceDestroy(p);
  }
};
struct DestroyCudnn {
  void operator()(cudnnHandle_t h) const noexcept { (void)cudnnDestroy(h); }
};
struct DestroyBackendDescriptor {
  void operator()(cudnnBackendDescriptor_t d) const noexcept {
    (void)cudnnBackendDestroyDescriptor(d);
  }
};

using Stream = Owner<cudaStream_t, DestroyStream>;
using Event = Owner<cudaEvent_t, DestroyEvent>;
using CublasLtHandle = Owner<cublasLtHandle_t, DestroyCublasLt>;
using MatmulDesc = Owner<cublasLtMatmulDesc_t, DestroyMatmulDesc>;
using MatrixLayout = Owner<cublasLtMatrixLayout_t, DestroyMatrixLayout>;
using MatmulPreference = Owner<cublasLtMatmulPreference_t, DestroyMatmulPreference>;
using CudnnHandle = Owner<cudnnHandle_t, DestroyCudnn>;
using BackendDescriptor = Owner<cudnnBackendDescriptor_t, DestroyBackendDescriptor>;

inline Stream make_stream() {
  cudaStream_t s = nullptr;
  VB_CUDA_CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  return Stream(s);
}
inline Event make_event() {
  cudaEvent_t e = nullptr;
  VB_CUDA_CHECK(cudaEventCreate(&e));
  return Event(e);
}
inline CublasLtHandle make_cublaslt_handle() {
  cublasLtHandle_t h = nullptr;
  VB_CUBLAS_CHECK(cublasLtCreate(&h));
  return CublasLtHandle(h);
}
inline CudnnHandle make_cudnn_handle() {
  cudnnHandle_t h = nullptr;
  VB_CUDNN_CHECK(cudnnCreate(&h));
  return CudnnHandle(h);
}
inline BackendDescriptor make_backend_descriptor(cudnnBackendDescriptorType_t type) {
  cudnnBackendDescriptor_t d = nullptr;
  VB_CUDNN_CHECK(cudnnBackendCreateDescriptor(type, &d));
  return BackendDescriptor(d);
}

// Device memory from cudaMalloc, freed with cudaFree. Throws CudaOutOfMemory when refused.
class DeviceBuffer {
 public:
  DeviceBuffer() = default;
  explicit DeviceBuffer(std::size_t bytes) : bytes_(bytes) {
    if (bytes > 0) VB_CUDA_CHECK(cudaMalloc(&data_, bytes));
  }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  DeviceBuffer(DeviceBuffer&& o) noexcept
      : data_(std::exchange(o.data_, nullptr)), bytes_(std::exchange(o.bytes_, 0)) {}
  DeviceBuffer& operator=(DeviceBuffer&& o) noexcept {
    if (this != &o) {
      reset();
      data_ = std::exchange(o.data_, nullptr);
      bytes_ = std::exchange(o.bytes_, 0);
    }
    return *this;
  }
  ~DeviceBuffer() { reset(); }

  void* get() const { return data_; }
  template <typename T>
  T* as() const {
    return static_cast<T*>(data_);
  }
  std::size_t bytes() const { return bytes_; }
  void reset() {
    if (data_ != nullptr) (void)cudaFree(data_);
    data_ = nullptr;
    bytes_ = 0;
  }

 private:
  void* data_ = nullptr;
  std::size_t bytes_ = 0;
};

}  // namespace vrambench::cuda
