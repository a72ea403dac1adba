// Error checks for the CUDA runtime, cuBLASLt, cuDNN and cuDNN's frontend: each failing call throws
// a typed error that names the call, file:line, the library's error name and string. Out-of-memory
// is its own type, because a trial that runs out of memory is a result, not a crash.
#pragma once

#include <cublasLt.h>
#include <cuda_runtime.h>
#include <cudnn.h>

#include <stdexcept>
#include <string>

namespace vrambench::cuda {

enum class Library { cuda, cublas, cudnn, cudnn_frontend };

class CudaError : public std::runtime_error {
 public:
  CudaError(Library library, int code, std::string call, std::string file, int line,
            std::string error_name, std::string error_string);
  Library library() const { return library_; }
  int code() const { return code_; }
  const std::string& call() const { return call_; }
  const std::string& file() const { return file_; }
  int line() const { return line_; }
  const std::string& error_name() const { return error_name_; }
  const std::string& error_string() const { return error_string_; }

 private:
  Library library_;
  int code_;
  std::string call_, file_;
  int line_;
  std::string error_name_, error_string_;
};

// A device allocation failed: cudaErrorMemoryAllocation, CUBLAS_STATUS_ALLOC_FAILED, cuDNN's
// allocation failures, or a frontend error that wraps one of them.
class CudaOutOfMemory : public CudaError {
 public:
  using CudaError::CudaError;
};

bool is_out_of_memory(cudaError_t e);
bool is_out_of_memory(cublasStatus_t s);
bool is_out_of_memory(cudnnStatus_t s);
// A cudnn-frontend error_t (its code as an int, its message) reports an allocation failure: the
// frontend wraps a failed cuDNN or CUDA call into CUDNN_BACKEND_API_FAILED / CUDA_API_FAILED with
// the status name or the CUDA error string in the message, so the message is what tells.
bool is_out_of_memory_frontend(int code, const std::string& message);
// The name of a cudnn_frontend::error_code_t value ("GRAPH_NOT_SUPPORTED"), "?" when unknown.
const char* frontend_error_name(int code);

// Throw CudaOutOfMemory or CudaError for a failed status; never returns.
[[noreturn]] void throw_cuda(cudaError_t e, const char* call, const char* file, int line);
[[noreturn]] void throw_cublas(cublasStatus_t s, const char* call, const char* file, int line);
[[noreturn]] void throw_cudnn(cudnnStatus_t s, const char* call, const char* file, int line);
[[noreturn]] void throw_cudnn_frontend(int code, const std::string& message, const char* call,
                                       const char* file, int line);

// Checks the last kernel launch (bad configuration, no device); clears the error it reports.
void check_launch(const char* kernel, const char* file, int line);

}  // namespace vrambench::cuda

#define VB_CUDA_CHECK(call)                                                 \
  do {                                                                      \
    const cudaError_t vb_status_ = (call);                                  \
    if (vb_status_ != cudaSuccess)                                          \
      ::vrambench::cuda::throw_cuda(vb_status_, #call, __FILE__, __LINE__); \
  } while (0)

#define VB_CUBLAS_CHECK(call)                                                 \
  do {                                                                        \
    const cublasStatus_t vb_status_ = (call);                                 \
    if (vb_status_ != CUBLAS_STATUS_SUCCESS)                                  \
      ::vrambench::cuda::throw_cublas(vb_status_, #call, __FILE__, __LINE__); \
  } while (0)

#define VB_CUDNN_CHECK(call)                                                 \
  do {                                                                       \
    const cudnnStatus_t vb_status_ = (call);                                 \
    if (vb_status_ != CUDNN_STATUS_SUCCESS)                                  \
      ::vrambench::cuda::throw_cudnn(vb_status_, #call, __FILE__, __LINE__); \
  } while (0)

// For cudnn-frontend calls that return an error_t; works without the frontend's headers here.
#define VB_CUDNN_FE_CHECK(call)                                                             \
  do {                                                                                      \
    auto vb_fe_status_ = (call);                                                            \
    if (vb_fe_status_.is_bad())                                                             \
      ::vrambench::cuda::throw_cudnn_frontend(static_cast<int>(vb_fe_status_.get_code()),   \
                                              vb_fe_status_.get_message(), #call, __FILE__, \
                                              __LINE__);                                    \
  } while (0)

// After every kernel launch: `kernel<<<grid, block, 0, stream>>>(...); VB_CHECK_LAUNCH("kernel");`
#define VB_CHECK_LAUNCH(name) ::vrambench::cuda::check_launch(name, __FILE__, __LINE__)
