// The linear family on cuda: linear layers, the input gradient of a frozen one and LoRA adapters,
// each a few cuBLASLt GEMMs (cuda/gemm.h) on the op's GEMM workspace; the bias gradient is a column
// sum (launch_bias_grad). The launchers of the op table (cuda/op_table.h).
#include "cuda/cast.h"
#include "cuda/gemm.h"
#include "cuda/op_table.h"

namespace vrambench {

void cuda_run_linear_fwd(const Operands& a, CudaContext& context) {
  const LinearDims d = linear_dims(a);
  context.gemm(a, cuda::plan_linear_fwd(d.M, d.In, d.Out), a.in[1].data, a.in[0].data,
               a.out[0].data, a.in.size() == 3 ? a.in[2].data : nullptr);
}

void cuda_run_linear_bwd(const Operands& a, CudaContext& context) {
  const LinearDims d = linear_dims(a);
  context.gemm(a, cuda::plan_linear_bwd_dx(d.M, d.In, d.Out), a.in[2].data, a.in[0].data,
               a.out[0].data);
  context.gemm(a, cuda::plan_linear_bwd_dw(d.M, d.In, d.Out, a.accumulates(a.out[1])), a.in[1].data,
               a.in[0].data, a.out[1].data);
  if (a.out.size() == 3)
    cuda::launch_bias_grad(a.dtype(), a.out[2].data, a.in[0].data, d.M, d.Out,
                           a.accumulates(a.out[2]), a.workspace, a.workspace_bytes,
                           context.stream());
}

void cuda_run_linear_dgrad(const Operands& a, CudaContext& context) {
  const LinearDims d = linear_dims(a);
  context.gemm(a, cuda::plan_linear_bwd_dx(d.M, d.In, d.Out), a.in[1].data, a.in[0].data,
               a.out[0].data);
}

// xa = x a^T; y[:, col_offset:+N] += scale xa b^T: the second GEMM writes a column slice of y, so
// its C has leading dimension Out (y's row length), not N. With y of another dtype than the
// adapters (PEFT's fp32 adapters over a 16-bit layer, or autocast's 16-bit ones over QLoRA's fp32
// stream) the product goes into lora_B's output first and is added into y's columns in fp32,
// stored in y's dtype, as PEFT's `result + lora_B(...) * scaling` and its `.to()` do.
void cuda_run_lora_fwd(const Operands& a, CudaContext& context) {
  const LoraDims d = lora_dims(a);
  const DType dt = a.dtype();
  const Operand& y = a.out[1];
  const DType y_dt = y.tensor->dtype;
  context.gemm(a, cuda::plan_linear_fwd(d.M, d.In, d.R), a.in[1].data, a.in[0].data, a.out[0].data);
  cuda::GemmPlan up = cuda::plan_linear_fwd(d.M, d.R, d.N);
  up.alpha = a.op.lora_scale;
  void* y_cols = cuda::element_offset(y.data, a.op.col_offset, y_dt);
  if (const Operand* cols = lora_columns(a, d)) {
    context.gemm(a, up, a.in[2].data, a.out[0].data, cols->data);
    cuda::launch_cast_rows(y_dt, y_cols, d.Out, dt, cols->data, d.N, d.M, d.N, true,
                           context.stream());
    return;
  }
  up.ldc = d.Out;
  up.beta = 1.0f;
  context.gemm(a, up, a.in[2].data, a.out[0].data, y_cols);
}

// g = scale dy[:, cols]; db = g^T xa; dxa = g b; da = dxa^T x; dx (+)= dxa a. dy's column slice
// is read with leading dimension Out (or first cast into the op's dtype when dy is of another);
// the scale rides on alpha.
void cuda_run_lora_bwd(const Operands& a, CudaContext& context) {
  const LoraDims d = lora_dims(a);
  const DType dt = a.dtype();
  const DType dy_dt = a.in[0].tensor->dtype;
  const void* dy = cuda::element_offset(a.in[0].data, a.op.col_offset, dy_dt);
  std::int64_t ld = d.Out;
  if (const Operand* cols = lora_columns(a, d)) {
    cuda::launch_cast_rows(dt, cols->data, d.N, dy_dt, dy, d.Out, d.M, d.N, false,
                           context.stream());
    dy = cols->data;
    ld = d.N;
  }
  cuda::GemmPlan db =
      cuda::plan_linear_bwd_dw(d.M, d.R, d.N, false);  // A = xa, B = dy slice, C = db
  db.ldb = ld;
  db.alpha = a.op.lora_scale;
  context.gemm(a, db, a.in[2].data, dy, a.out[1].data);
  cuda::GemmPlan dxa = cuda::plan_linear_bwd_dx(d.M, d.R, d.N);  // A = b, B = dy slice, C = dxa
  dxa.ldb = ld;
  dxa.alpha = a.op.lora_scale;
  context.gemm(a, dxa, a.in[4].data, dy, a.out[2].data);
  // A = x, B = dxa, C = da
  context.gemm(a, cuda::plan_linear_bwd_dw(d.M, d.In, d.R, false), a.in[1].data, a.out[2].data,
               a.out[0].data);
  if (a.out.size() == 4) {
    cuda::GemmPlan dx = cuda::plan_linear_bwd_dx(d.M, d.In, d.R);  // A = a, B = dxa, C = dx
    dx.beta = a.op.accumulate ? 1.0f : 0.0f;                       // into the frozen base's dx
    context.gemm(a, dx, a.in[3].data, a.out[2].data, a.out[3].data);
  }
}

}  // namespace vrambench
