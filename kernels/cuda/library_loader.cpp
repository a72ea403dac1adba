// cuBLASLt and NVRTC, opened when first called rather than when the tool starts. Loading
// libcublasLt.so adds about 150 MB and libnvrtc.so 30 MB to a process's resident memory (their
// relocations and initialisers), which every run paid, a sim sweep too, before anything touched a
// GPU. The tool links these definitions instead of the libraries: each forwards to the library's
// own function, looked up on first use; where the library cannot be opened, each returns the
// library's "not initialised" status, so the caller reports it through its usual check.
#include <cublasLt.h>
#include <dlfcn.h>
#include <nvrtc.h>

#include <string>

namespace {

// The library `soname`, opened once (never closed: its functions are used until the end).
void* open_library(const char* soname) {
  return dlopen(soname, RTLD_NOW | RTLD_LOCAL);
}

void* cublaslt() {
  static void* handle =
      open_library(("libcublasLt.so." + std::to_string(CUBLAS_VER_MAJOR)).c_str());
  return handle;
}

void* nvrtc() {
  static void* handle =
      open_library(("libnvrtc.so." + std::to_string(CUDART_VERSION / 1000)).c_str());
  return handle;
}

// `name` of `library` as a pointer of type Fn, or nullptr when either is missing.
template <typename Fn>
Fn lookup(void* library, const char* name) {
  return library ? reinterpret_cast<Fn>(dlsym(library, name)) : nullptr;
}

}  // namespace

// Each definition below has the library header's signature (a mismatch does not compile): the
// call goes to the library's function as is.
#define VRAMBENCH_FORWARD(library, failed, ret, name, params, args)   \
  extern "C" ret name params {                                        \
    static const auto fn = lookup<decltype(&name)>(library(), #name); \
    return fn ? fn args : failed;                                     \
  }

namespace {
constexpr cublasStatus_t kNoCublasLt = CUBLAS_STATUS_NOT_INITIALIZED;
constexpr nvrtcResult kNoNvrtc = NVRTC_ERROR_INTERNAL_ERROR;
constexpr const char* kNoCublasLtText = "libcublasLt could not be opened";
}  // namespace

// cuBLASLt (kernels/cuda/gemm.cu).
VRAMBENCH_FORWARD(cublaslt, kNoCublasLt, cublasStatus_t, cublasLtCreate,
                  (cublasLtHandle_t * handle), (handle))
VRAMBENCH_FORWARD(cublaslt, kNoCublasLt, cublasStatus_t, cublasLtDestroy, (cublasLtHandle_t handle),
                  (handle))
VRAMBENCH_FORWARD(cublaslt, kNoCublasLtText, const char*, cublasLtGetStatusName,
                  (cublasStatus_t status), (status))
VRAMBENCH_FORWARD(cublaslt, kNoCublasLtText, const char*, cublasLtGetStatusString,
                  (cublasStatus_t status), (status))
VRAMBENCH_FORWARD(cublaslt, size_t{0}, size_t, cublasLtGetVersion, (void), ())
VRAMBENCH_FORWARD(cublaslt, kNoCublasLt, cublasStatus_t, cublasLtMatmul,
                  (cublasLtHandle_t handle, cublasLtMatmulDesc_t desc, const void* alpha,
                   const void* A, cublasLtMatrixLayout_t Adesc, const void* B,
                   cublasLtMatrixLayout_t Bdesc, const void* beta, const void* C,
                   cublasLtMatrixLayout_t Cdesc, void* D, cublasLtMatrixLayout_t Ddesc,
                   const cublasLtMatmulAlgo_t* algo, void* workspace, size_t workspace_bytes,
                   cudaStream_t stream),
                  (handle, desc, alpha, A, Adesc, B, Bdesc, beta, C, Cdesc, D, Ddesc, algo,
                   workspace, workspace_bytes, stream))
VRAMBENCH_FORWARD(cublaslt, kNoCublasLt, cublasStatus_t, cublasLtMatmulAlgoGetHeuristic,
                  (cublasLtHandle_t handle, cublasLtMatmulDesc_t desc, cublasLtMatrixLayout_t Adesc,
                   cublasLtMatrixLayout_t Bdesc, cublasLtMatrixLayout_t Cdesc,
                   cublasLtMatrixLayout_t Ddesc, cublasLtMatmulPreference_t preference,
                   int requested, cublasLtMatmulHeuristicResult_t results[], int* returned),
                  (handle, desc, Adesc, Bdesc, Cdesc, Ddesc, preference, requested, results,
                   returned))
VRAMBENCH_FORWARD(cublaslt, kNoCublasLt, cublasStatus_t, cublasLtMatmulDescCreate,
                  (cublasLtMatmulDesc_t * desc, cublasComputeType_t compute, cudaDataType_t scale),
                  (desc, compute, scale))
VRAMBENCH_FORWARD(cublaslt, kNoCublasLt, cublasStatus_t, cublasLtMatmulDescDestroy,
                  (cublasLtMatmulDesc_t desc), (desc))
VRAMBENCH_FORWARD(cublaslt, kNoCublasLt, cublasStatus_t, cublasLtMatmulDescSetAttribute,
                  (cublasLtMatmulDesc_t desc, cublasLtMatmulDescAttributes_t attr, const void* buf,
                   size_t bytes),
                  (desc, attr, buf, bytes))
VRAMBENCH_FORWARD(cublaslt, kNoCublasLt, cublasStatus_t, cublasLtMatmulPreferenceCreate,
                  (cublasLtMatmulPreference_t * pref), (pref))
VRAMBENCH_FORWARD(cublaslt, kNoCublasLt, cublasStatus_t, cublasLtMatmulPreferenceDestroy,
                  (cublasLtMatmulPreference_t pref), (pref))
VRAMBENCH_FORWARD(cublaslt, kNoCublasLt, cublasStatus_t, cublasLtMatmulPreferenceSetAttribute,
                  (cublasLtMatmulPreference_t pref, cublasLtMatmulPreferenceAttributes_t attr,
                   const void* buf, size_t bytes),
                  (pref, attr, buf, bytes))
VRAMBENCH_FORWARD(cublaslt, kNoCublasLt, cublasStatus_t, cublasLtMatrixLayoutCreate,
                  (cublasLtMatrixLayout_t * layout, cudaDataType type, uint64_t rows, uint64_t cols,
                   int64_t ld),
                  (layout, type, rows, cols, ld))
VRAMBENCH_FORWARD(cublaslt, kNoCublasLt, cublasStatus_t, cublasLtMatrixLayoutDestroy,
                  (cublasLtMatrixLayout_t layout), (layout))
VRAMBENCH_FORWARD(cublaslt, kNoCublasLt, cublasStatus_t, cublasLtMatrixLayoutSetAttribute,
                  (cublasLtMatrixLayout_t layout, cublasLtMatrixLayoutAttribute_t attr,
                   const void* buf, size_t bytes),
                  (layout, attr, buf, bytes))

// Read back by the GEMM plan tests (tests/gpu/test_gemm_plans.cpp).
VRAMBENCH_FORWARD(cublaslt, kNoCublasLt, cublasStatus_t, cublasLtMatmulDescGetAttribute,
                  (cublasLtMatmulDesc_t desc, cublasLtMatmulDescAttributes_t attr, void* buf,
                   size_t bytes, size_t* written),
                  (desc, attr, buf, bytes, written))
VRAMBENCH_FORWARD(cublaslt, kNoCublasLt, cublasStatus_t, cublasLtMatrixLayoutGetAttribute,
                  (cublasLtMatrixLayout_t layout, cublasLtMatrixLayoutAttribute_t attr, void* buf,
                   size_t bytes, size_t* written),
                  (layout, attr, buf, bytes, written))
VRAMBENCH_FORWARD(cublaslt, kNoCublasLt, cublasStatus_t, cublasLtMatmulPreferenceGetAttribute,
                  (cublasLtMatmulPreference_t pref, cublasLtMatmulPreferenceAttributes_t attr,
                   void* buf, size_t bytes, size_t* written),
                  (pref, attr, buf, bytes, written))

// NVRTC: cudnn-frontend's headers hold an NVRTC-compiled engine that nothing here selects; its
// calls are linked all the same.
VRAMBENCH_FORWARD(nvrtc, kNoNvrtc, nvrtcResult, nvrtcCompileProgram,
                  (nvrtcProgram prog, int count, const char* const* options),
                  (prog, count, options))
VRAMBENCH_FORWARD(nvrtc, kNoNvrtc, nvrtcResult, nvrtcCreateProgram,
                  (nvrtcProgram * prog, const char* src, const char* name, int headers,
                   const char* const* sources, const char* const* names),
                  (prog, src, name, headers, sources, names))
VRAMBENCH_FORWARD(nvrtc, kNoNvrtc, nvrtcResult, nvrtcDestroyProgram, (nvrtcProgram * prog), (prog))
VRAMBENCH_FORWARD(nvrtc, kNoNvrtc, nvrtcResult, nvrtcGetCUBIN, (nvrtcProgram prog, char* cubin),
                  (prog, cubin))
VRAMBENCH_FORWARD(nvrtc, kNoNvrtc, nvrtcResult, nvrtcGetCUBINSize,
                  (nvrtcProgram prog, size_t* bytes), (prog, bytes))
VRAMBENCH_FORWARD(nvrtc, kNoNvrtc, nvrtcResult, nvrtcGetProgramLog, (nvrtcProgram prog, char* log),
                  (prog, log))
VRAMBENCH_FORWARD(nvrtc, kNoNvrtc, nvrtcResult, nvrtcGetProgramLogSize,
                  (nvrtcProgram prog, size_t* bytes), (prog, bytes))
