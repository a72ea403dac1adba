// Typed errors for CUDA, cuBLASLt and cuDNN failures (see check.h).
#include <utility>

#include "cuda/check.h"

namespace vrambench::cuda {
namespace {

const char* library_name(Library l) {
  switch (l) {
    case Library::cuda:
      return "CUDA";
    case Library::cublas:
      return "cuBLASLt";
    case Library::cudnn:
      return "cuDNN";
  }
  return "?";
}

std::string message(Library library, int code, const std::string& call, const std::string& file,
                    int line, const std::string& name, const std::string& text) {
  return std::string(library_name(library)) + " error " + name + " (" + std::to_string(code) +
         "): " + text + " at " + file + ":" + std::to_string(line) + " in " + call;
}

}  // namespace

CudaError::CudaError(Library library, int code, std::string call, std::string file, int line,
                     std::string error_name, std::string error_string)
    : std::runtime_error(message(library, code, call, file, line, error_name, error_string)),
      library_(library),
      code_(code),
      call_(std::move(call)),
      file_(std::move(file)),
      line_(line),
      error_name_(std::move(error_name)),
      error_string_(std::move(error_string)) {}

bool is_out_of_memory(cudaError_t e) {
  return e == cudaErrorMemoryAllocation;
}
bool is_out_of_memory(cublasStatus_t s) {
  return s == CUBLAS_STATUS_ALLOC_FAILED;
}
bool is_out_of_memory(cudnnStatus_t s) {
  return s == CUDNN_STATUS_INTERNAL_ERROR_DEVICE_ALLOCATION_FAILED ||
         s == CUDNN_STATUS_INTERNAL_ERROR_HOST_ALLOCATION_FAILED;
}

void throw_cuda(cudaError_t e, const char* call, const char* file, int line) {
  const int code = static_cast<int>(e);
  if (is_out_of_memory(e))
    throw CudaOutOfMemory(Library::cuda, code, call, file, line, cudaGetErrorName(e),
                          cudaGetErrorString(e));
  throw CudaError(Library::cuda, code, call, file, line, cudaGetErrorName(e),
                  cudaGetErrorString(e));
}

void throw_cublas(cublasStatus_t s, const char* call, const char* file, int line) {
  const int code = static_cast<int>(s);
  if (is_out_of_memory(s))
    throw CudaOutOfMemory(Library::cublas, code, call, file, line, cublasLtGetStatusName(s),
                          cublasLtGetStatusString(s));
  throw CudaError(Library::cublas, code, call, file, line, cublasLtGetStatusName(s),
                  cublasLtGetStatusString(s));
}

void throw_cudnn(cudnnStatus_t s, const char* call, const char* file, int line) {
  const int code = static_cast<int>(s);
  // The last error string carries the backend's reason (which attribute, which shape).
  char detail[512] = {};
  cudnnGetLastErrorString(detail, sizeof(detail));
  std::string text = cudnnGetErrorString(s);
  if (detail[0] != '\0') text += std::string(": ") + detail;
  if (is_out_of_memory(s))
    throw CudaOutOfMemory(Library::cudnn, code, call, file, line, cudnnGetErrorString(s), text);
  throw CudaError(Library::cudnn, code, call, file, line, cudnnGetErrorString(s), text);
}

void check_launch(const char* kernel, const char* file, int line) {
  const cudaError_t e = cudaGetLastError();
  if (e != cudaSuccess) throw_cuda(e, kernel, file, line);
}

}  // namespace vrambench::cuda
