// The CUDA side of the op table (program/ops.def): one launcher per op kind, which reads its
// operands (op/operands.h), checks them and launches its kernels on the context's stream. Each is
// declared here from the table's rows and defined beside its kernels, in one of
// kernels/cuda/<family>*; cuda_run() is the executor's dispatch, an array indexed by OpKind.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <type_traits>

#include "core/dtype.h"
#include "cuda/owners.h"
#include "op/operands.h"
#include "program/program.h"

namespace vrambench {
namespace cuda {
class GemmRunner;
struct GemmPlan;
class CudnnSdpa;
}  // namespace cuda

// What the launchers share on one executor: its stream, its cuBLASLt runner and cuDNN attention
// (each made at its first use), how it runs flash attention, and the optimizer steps per weight.
class CudaContext {
 public:
  // flash_on_cudnn(storage): whether flash_fwd and flash_bwd over activations stored as `storage`
  // run through cuDNN's fused attention (cuda/attention_cudnn.h) rather than the plain fused
  // kernels (cuda/attention_flash.h); the executor resolves it from its FlashImpl.
  explicit CudaContext(std::function<bool(DType)> flash_on_cudnn);
  ~CudaContext();
  CudaContext(const CudaContext&) = delete;
  CudaContext& operator=(const CudaContext&) = delete;

  cudaStream_t stream() const { return stream_.get(); }
  bool flash_on_cudnn(DType storage) const { return flash_on_cudnn_(storage); }
  cuda::CudnnSdpa& cudnn_sdpa();

  // C = plan(A, B) [+ bias] with the op's GEMM workspace, in the recipe's GEMM math where the op
  // computes in the recipe's storage dtype (TF32 under tf32), else in the op's own: PEFT's fp32
  // adapters under a 16-bit recipe multiply in fp32, PyTorch's default for matmuls (no TF32).
  void gemm(const Operands& a, const cuda::GemmPlan& plan, const void* A, const void* B, void* C,
            const void* bias = nullptr);
  // The same in `dtype`'s math (the recipe's where it stores `dtype`), for an op whose operands
  // do not say what its GEMMs compute in (the LM head's tiles beside fp32 log-probabilities).
  void gemm(const Operands& a, DType dtype, const cuda::GemmPlan& plan, const void* A,
            const void* B, void* C);

  OptimizerSteps optimizer_steps;

 private:
  cuda::Stream stream_;
  std::function<bool(DType)> flash_on_cudnn_;
  std::unique_ptr<cuda::GemmRunner> gemm_;
  std::unique_ptr<cuda::CudnnSdpa> cudnn_sdpa_;
};

// clang-format off
#define VB_OP(kind, ...) void cuda_run_##kind(const Operands& a, CudaContext& context);
#include "program/ops.def"
// clang-format on

using CudaRun = void (*)(const Operands&, CudaContext&);
// The launcher of `kind`.
CudaRun cuda_run(OpKind kind);

namespace cuda {

// `elements` elements of `dtype` past `base`: a column block of a row (a head of packed q|k|v, up
// in packed gate|up, a LoRA adapter's columns).
template <typename P>
P* element_offset(P* base, std::int64_t elements, DType dtype) {
  using Byte = std::conditional_t<std::is_const_v<P>, const char, char>;
  return reinterpret_cast<P*>(reinterpret_cast<Byte*>(base) + elements * dtype_size(dtype));
}

}  // namespace cuda
}  // namespace vrambench
