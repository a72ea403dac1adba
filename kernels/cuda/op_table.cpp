// The CUDA dispatch, made of the op table's rows, and the context its launchers share.
#include "cuda/op_table.h"

#include <fmt/format.h>

#include <array>
#include <utility>

#include "cuda/attention_cudnn.h"
#include "cuda/gemm.h"

namespace vrambench {
namespace {

// One launcher per row, in the enum's order (both are made of the rows of program/ops.def).
// clang-format off
constexpr std::array<CudaRun, kOpKindCount> kCudaRuns{
#define VB_OP(kind, ...) &cuda_run_##kind,
#include "program/ops.def"
};
// clang-format on

// The recipe's GEMM math where the op computes in the recipe's storage dtype, else `dtype`'s.
cuda::GemmMath gemm_math(const Operands& a, DType dtype) {
  const cuda::GemmMath m = cuda::gemm_math(a.program.config.dtype);
  if (cuda::gemm_storage(m) == dtype) return m;
  if (!is_floating(dtype)) a.fail(fmt::format("no GEMM computes in {}", dtype_name(dtype)));
  return cuda::gemm_math_of(dtype);
}

}  // namespace

CudaRun cuda_run(OpKind kind) {
  return kCudaRuns.at(static_cast<std::size_t>(kind));
}

CudaContext::CudaContext(std::function<bool(DType)> flash_on_cudnn)
    : stream_(cuda::make_stream()), flash_on_cudnn_(std::move(flash_on_cudnn)) {}

CudaContext::~CudaContext() = default;

cuda::CudnnSdpa& CudaContext::cudnn_sdpa() {
  if (!cudnn_sdpa_) cudnn_sdpa_ = std::make_unique<cuda::CudnnSdpa>();
  return *cudnn_sdpa_;
}

void CudaContext::gemm(const Operands& a, const cuda::GemmPlan& plan, const void* A, const void* B,
                       void* C, const void* bias) {
  if (!gemm_) gemm_ = std::make_unique<cuda::GemmRunner>();
  gemm_->run(plan, gemm_math(a, a.dtype()), A, B, C, bias, a.workspace, a.workspace_bytes,
             stream());
}

void CudaContext::gemm(const Operands& a, DType dtype, const cuda::GemmPlan& plan, const void* A,
                       const void* B, void* C) {
  if (!gemm_) gemm_ = std::make_unique<cuda::GemmRunner>();
  gemm_->run(plan, gemm_math(a, dtype), A, B, C, nullptr, a.workspace, a.workspace_bytes, stream());
}

}  // namespace vrambench
