// Typed errors for CUDA, cuBLASLt, cuDNN and cudnn-frontend failures (see check.h).
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
    case Library::cudnn_frontend:
      return "cuDNN frontend";
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

bool is_out_of_memory_frontend(int code, const std::string& message) {
  // CUDA_API_FAILED (10) carries cudaGetErrorString ("out of memory"); CUDNN_BACKEND_API_FAILED
  // (11) the status name (CUDNN_STATUS_INTERNAL_ERROR_{DEVICE,HOST}_ALLOCATION_FAILED, or the
  // older CUDNN_STATUS_ALLOC_FAILED). Other codes may quote either when they pass a failure on.
  if (code == 0) return false;  // OK
  for (const char* marker : {"ALLOCATION_FAILED", "CUDNN_STATUS_ALLOC_FAILED", "out of memory",
                             "cudaErrorMemoryAllocation"})
    if (message.find(marker) != std::string::npos) return true;
  return false;
}

const char* frontend_error_name(int code) {
  // cudnn_frontend::error_code_t in its declaration order (attention_cudnn.cpp checks the order
  // against the frontend's headers at compile time).
  static const char* const names[] = {"OK",
                                      "ATTRIBUTE_NOT_SET",
                                      "SHAPE_DEDUCTION_FAILED",
                                      "INVALID_TENSOR_NAME",
                                      "INVALID_VARIANT_PACK",
                                      "GRAPH_NOT_SUPPORTED",
                                      "GRAPH_EXECUTION_PLAN_CREATION_FAILED",
                                      "GRAPH_EXECUTION_FAILED",
                                      "HEURISTIC_QUERY_FAILED",
                                      "UNSUPPORTED_GRAPH_FORMAT",
                                      "CUDA_API_FAILED",
                                      "CUDNN_BACKEND_API_FAILED",
                                      "INVALID_CUDA_DEVICE",
                                      "HANDLE_ERROR",
                                      "INVALID_VALUE",
                                      "NVRTC_COMPILATION_FAILED"};
  if (code < 0 || code >= static_cast<int>(sizeof(names) / sizeof(names[0]))) return "?";
  return names[code];
}

void throw_cudnn_frontend(int code, const std::string& message, const char* call, const char* file,
                          int line) {
  const std::string text = message.empty() ? "(the frontend gave no message)" : message;
  if (is_out_of_memory_frontend(code, message))
    throw CudaOutOfMemory(Library::cudnn_frontend, code, call, file, line,
                          frontend_error_name(code), text);
  throw CudaError(Library::cudnn_frontend, code, call, file, line, frontend_error_name(code), text);
}

void check_launch(const char* kernel, const char* file, int line) {
  const cudaError_t e = cudaGetLastError();
  if (e != cudaSuccess) throw_cuda(e, kernel, file, line);
}

}  // namespace vrambench::cuda
