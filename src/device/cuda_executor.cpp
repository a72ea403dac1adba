// The cuda device's Executor: runs each op of a Program with the kernels of kernels/cuda on one
// stream. Tensors arrive as device pointers bound by the trial runner; GEMM workspace tensors are
// found by role. Initial contents follow the cpu executor's rules (same seed, same values), filled
// on the device.
#include <cuda_runtime.h>
#include <fmt/format.h>

#include <string>
#include <unordered_map>
#include <vector>

#include "core/error.h"
#include "cuda/activation.h"
#include "cuda/add.h"
#include "cuda/attention.h"
#include "cuda/attention_cudnn.h"
#include "cuda/attention_flash.h"
#include "cuda/cast.h"
#include "cuda/check.h"
#include "cuda/cross_entropy.h"
#include "cuda/dropout.h"
#include "cuda/embedding.h"
#include "cuda/gemm.h"
#include "cuda/init.h"
#include "cuda/layernorm.h"
#include "cuda/optimizer.h"
#include "cuda/owners.h"
#include "cuda/quant.h"
#include "cuda/rmsnorm.h"
#include "cuda/rope.h"
#include "device/cuda_device.h"
#include "device/init.h"
#include "op/operands.h"

namespace vrambench {
namespace {

using namespace vrambench::cuda;

const void* cptr(const Operand& b) {
  return b.data;
}
template <typename P>
P* offset(P* base, std::int64_t elements, DType dtype) {
  using Byte = std::conditional_t<std::is_const_v<P>, const char, char>;
  return reinterpret_cast<P*>(reinterpret_cast<Byte*>(base) + elements * dtype_size(dtype));
}

AttentionShape attn_shape(const Operands& a) {
  const QkvShape s = attention_shape(a);
  return {s.batch, s.seq, s.heads, s.kv_heads, s.head_dim};
}

class CudaExecutor final : public Executor {
 public:
  CudaExecutor(std::uint64_t seed, FlashImpl flash)
      : stream_(make_stream()), seed_(seed), flash_impl_(flash) {}

  std::string_view name() const override { return "cuda"; }

  std::string_view attention_impl(const RunConfig& cfg) const override {
    if (cfg.attention == Attention::eager) return "eager";
    return resolve_flash_impl(flash_impl_, activation_dtype(cfg.dtype)) == FlashImpl::cudnn
               ? "cudnn-sdpa"
               : "kernel";
  }

  void initialize(const Program& program, int tensor_id, void* data) override {
    const Tensor& t = program.tensor(tensor_id);
    try {
      if (const auto part = quantized_part(program, tensor_id)) {
        initialize_quantized(program, tensor_id, *part, data);
        return;
      }
      launch_init(data, t.dtype, t.elements(), init_rule(program, tensor_id, seed_), stream_.get());
    } catch (const CudaOutOfMemory& e) {
      throw DeviceOutOfMemory(fmt::format("initialising '{}': {}", t.name, e.what()));
    }
  }

  void execute(const Program& program, std::size_t op_index,
               const std::vector<void*>& data) override {
    const Operands a = decode_operands(program, op_index, data);
    try {
      run(a);
    } catch (const CudaOutOfMemory& e) {
      throw DeviceOutOfMemory(fmt::format("op '{}': {}", a.op.name, e.what()));
    }
  }

  void synchronize() override { VB_CUDA_CHECK(cudaStreamSynchronize(stream_.get())); }

 private:
  GemmRunner& gemm() {
    if (!gemm_) gemm_ = std::make_unique<GemmRunner>();
    return *gemm_;
  }
  // The recipe's GEMM math where the op computes in the recipe's storage dtype (TF32 under tf32),
  // else the op's own: PEFT's fp32 adapters under a 16-bit recipe multiply in fp32, PyTorch's
  // default for matmuls (no TF32).
  GemmMath math(const Operands& a) const {
    const GemmMath m = gemm_math(a.program.config.dtype);
    if (gemm_storage(m) == a.dtype()) return m;
    if (!is_floating(a.dtype()))
      a.fail(fmt::format("no GEMM computes in {}", dtype_name(a.dtype())));
    return gemm_math_of(a.dtype());
  }
  void run_gemm(const Operands& a, const GemmPlan& plan, const void* A, const void* B, void* C,
                const void* bias = nullptr) {
    gemm().run(plan, math(a), A, B, C, bias, a.workspace, a.workspace_bytes, stream_.get());
  }

  void initialize_quantized(const Program& program, int tensor_id, const QuantizedPart& part,
                            void* data);
  void run(const Operands& a);
  void attention(const Operands& a);
  void dequantize(const Operands& a);
  void lora_fwd(const Operands& a);
  void lora_bwd(const Operands& a);
  void adamw_8bit(const Operands& a);
  void cudnn_flash(const Operands& a, const AttentionShape& s, DType dt);
  void optimizer(const Operands& a);

  Stream stream_;
  std::uint64_t seed_;
  std::unique_ptr<GemmRunner> gemm_;
  FlashImpl flash_impl_;
  std::unique_ptr<CudnnSdpa> cudnn_sdpa_;  // the executor's one cuDNN handle and plan cache
  OptimizerSteps steps_;
};

void CudaExecutor::run(const Operands& a) {
  const Op& op = a.op;
  cudaStream_t st = stream_.get();
  const DType dt = a.dtype();
  // A kernel reads every operand as `dt` but the ones the signature frees from it (the hf step's
  // mixed dtypes), which it takes in their own: one stored otherwise would be misread.
  if (const Operand* o = operand_of_another_dtype(a))
    a.fail(
        fmt::format("'{}' is {} where the op computes in {}, and its kernel takes no other "
                    "dtype there; --no-execute measures the step's allocations without "
                    "running kernels",
                    o->tensor->name, dtype_name(o->tensor->dtype), dtype_name(dt)));
  switch (op.kind) {
    case OpKind::embedding_fwd: {
      const EmbeddingDims d = embedding_dims(a);
      const Operand* wpe = a.input("wpe");
      launch_embedding_fwd(dt, a.out[0].data, a.i32(a.in[0]), cptr(a.in[1]),
                           wpe ? cptr(*wpe) : nullptr, d.B * d.S, d.S, d.H, op.embed_scale, st);
      return;
    }
    case OpKind::embedding_bwd: {
      const EmbeddingDims d = embedding_dims(a);
      const Operand* dwpe = a.output("dwpe");
      launch_embedding_bwd(dt, a.out[0].data, dwpe ? dwpe->data : nullptr, cptr(a.in[0]),
                           a.i32(a.in[1]), d.B * d.S, d.S, d.H, d.V, d.P, a.accumulates(a.out[0]),
                           op.embed_scale, a.workspace, a.workspace_bytes, st);
      return;
    }
    case OpKind::layernorm_fwd:
      launch_layernorm_fwd(dt, a.out[0].data, a.f32(a.out[1]), a.f32(a.out[2]), cptr(a.in[0]),
                           cptr(a.in[1]), a.in.size() == 3 ? cptr(a.in[2]) : nullptr, rows(a.in[0]),
                           last_dim(a.in[0]), op.eps, st);
      return;
    case OpKind::layernorm_bwd:
      // A frozen norm (fine-tuning) writes dx alone.
      launch_layernorm_bwd(
          dt, a.out[0].data, a.out.size() >= 2 ? a.out[1].data : nullptr,
          a.out.size() == 3 ? a.out[2].data : nullptr, cptr(a.in[0]), cptr(a.in[1]), cptr(a.in[2]),
          a.f32(a.in[3]), a.f32(a.in[4]), rows(a.in[1]), last_dim(a.in[1]),
          a.out.size() >= 2 && a.accumulates(a.out[1]), a.workspace, a.workspace_bytes, st);
      return;
    case OpKind::rmsnorm_fwd:
      // x and w may be of other dtypes than y (LlamaRMSNorm's fp32 input, fp32 norm weights).
      launch_rmsnorm_fwd(dt, a.in[0].tensor->dtype, a.in[1].tensor->dtype, a.out[0].data,
                         a.f32(a.out[1]), cptr(a.in[0]), cptr(a.in[1]), rows(a.in[0]),
                         last_dim(a.in[0]), op.eps, op.norm_offset, st);
      return;
    case OpKind::rmsnorm_bwd:
      // dy's dtype (dt), x's (and dx's) and w's (and dw's).
      launch_rmsnorm_bwd(dt, a.in[1].tensor->dtype, a.in[2].tensor->dtype, a.out[0].data,
                         a.out.size() == 2 ? a.out[1].data : nullptr, cptr(a.in[0]), cptr(a.in[1]),
                         cptr(a.in[2]), a.f32(a.in[3]), rows(a.in[1]), last_dim(a.in[1]),
                         op.norm_offset, a.out.size() == 2 && a.accumulates(a.out[1]), a.workspace,
                         a.workspace_bytes, st);
      return;
    case OpKind::qk_norm_fwd:
    case OpKind::qk_norm_bwd: {
      const AttentionShape s = attn_shape(a);
      const QkNormShape q{s.batch * s.seq, s.heads, s.kv_heads, s.head_dim};
      if (op.kind == OpKind::qk_norm_fwd) {
        // The weights may be of another dtype (autocast's fp32 model).
        launch_qk_norm_fwd(dt, a.in[1].tensor->dtype, a.out[0].data, a.f32(a.out[1]), cptr(a.in[0]),
                           cptr(a.in[1]), cptr(a.in[2]), q, op.eps, op.norm_offset, st);
      } else {
        const bool dw = a.out.size() == 3;  // frozen norms write dqkv alone
        launch_qk_norm_bwd(dt, a.in[2].tensor->dtype, a.out[0].data, dw ? a.out[1].data : nullptr,
                           dw ? a.out[2].data : nullptr, cptr(a.in[0]), cptr(a.in[1]),
                           cptr(a.in[2]), cptr(a.in[3]), a.f32(a.in[4]), q, op.norm_offset,
                           dw && a.accumulates(a.out[1]), a.workspace, a.workspace_bytes, st);
      }
      return;
    }
    case OpKind::softcap_fwd:
      launch_softcap_fwd(dt, a.out[0].data, cptr(a.in[0]), a.in[0].tensor->elements(), op.softcap,
                         st);
      return;
    case OpKind::softcap_bwd:
      launch_softcap_bwd(dt, a.out[0].data, cptr(a.in[0]), cptr(a.in[1]),
                         a.in[1].tensor->elements(), op.softcap, st);
      return;
    case OpKind::linear_fwd: {
      const LinearDims d = linear_dims(a);
      run_gemm(a, plan_linear_fwd(d.M, d.In, d.Out), cptr(a.in[1]), cptr(a.in[0]), a.out[0].data,
               a.in.size() == 3 ? cptr(a.in[2]) : nullptr);
      return;
    }
    case OpKind::linear_bwd: {
      const LinearDims d = linear_dims(a);
      run_gemm(a, plan_linear_bwd_dx(d.M, d.In, d.Out), cptr(a.in[2]), cptr(a.in[0]),
               a.out[0].data);
      run_gemm(a, plan_linear_bwd_dw(d.M, d.In, d.Out, a.accumulates(a.out[1])), cptr(a.in[1]),
               cptr(a.in[0]), a.out[1].data);
      if (a.out.size() == 3)
        launch_bias_grad(dt, a.out[2].data, cptr(a.in[0]), d.M, d.Out, a.accumulates(a.out[2]),
                         a.workspace, a.workspace_bytes, st);
      return;
    }
    case OpKind::gelu_fwd:
      launch_gelu_fwd(dt, a.out[0].data, cptr(a.in[0]), a.in[0].tensor->elements(), st);
      return;
    case OpKind::gelu_bwd:
      launch_gelu_bwd(dt, a.out[0].data, cptr(a.in[0]), cptr(a.in[1]), a.in[1].tensor->elements(),
                      st);
      return;
    case OpKind::swiglu_fwd: {
      // Packed (Phi-3's gate_up_proj): up is the second half of each gate|up row.
      const GateShape g = gate_shape(op, *a.out[0].tensor, *a.in[0].tensor);
      const std::int64_t ld = g.packed ? 2 * g.width : g.width;
      const void* up = g.packed ? offset(cptr(a.in[0]), g.width, dt) : cptr(a.in[1]);
      launch_swiglu_fwd(dt, a.out[0].data, cptr(a.in[0]), up, g.rows, g.width, ld, op.gelu_gate,
                        st);
      return;
    }
    case OpKind::swiglu_bwd: {
      const GateShape g = gate_shape(op, *a.in[0].tensor, *a.in[1].tensor);
      const std::int64_t ld = g.packed ? 2 * g.width : g.width;
      const void* up = g.packed ? offset(cptr(a.in[1]), g.width, dt) : cptr(a.in[2]);
      void* dup = g.packed ? offset(a.out[0].data, g.width, dt) : a.out[1].data;
      launch_swiglu_bwd(dt, a.out[0].data, dup, cptr(a.in[0]), cptr(a.in[1]), up, g.rows, g.width,
                        ld, op.gelu_gate, st);
      return;
    }
    case OpKind::rope_fwd:
    case OpKind::rope_bwd: {
      const AttentionShape s = attn_shape(a);
      const RopeShape r{s.batch, s.seq, s.heads, s.kv_heads, s.head_dim};
      // The input may be of another dtype (QLoRA's fp32 q|k|v, rotated into 16 bits).
      const DType in_dt = a.in[0].tensor->dtype;
      if (op.kind == OpKind::rope_fwd)
        launch_rope_fwd(dt, a.out[0].data, in_dt, cptr(a.in[0]), r, st);
      else
        launch_rope_bwd(dt, a.out[0].data, in_dt, cptr(a.in[0]), r, st);
      return;
    }
    case OpKind::attn_scores:
    case OpKind::attn_values:
    case OpKind::attn_values_bwd:
    case OpKind::attn_scores_bwd:
      attention(a);
      return;
    case OpKind::softmax_fwd:
      // The scores may be 16-bit beside fp32 probabilities (Llama's softmax in fp32).
      launch_softmax_fwd(dt, a.out[0].data, a.in[0].tensor->dtype, cptr(a.in[0]), rows(a.in[0]),
                         last_dim(a.in[0]), st);
      return;
    case OpKind::softmax_bwd:
      launch_softmax_bwd(dt, a.out[0].tensor->dtype, a.out[0].data, cptr(a.in[0]), cptr(a.in[1]),
                         rows(a.in[1]), last_dim(a.in[1]), st);
      return;
    case OpKind::flash_fwd:
    case OpKind::flash_bwd: {
      const bool fwd = op.kind == OpKind::flash_fwd;
      const AttentionShape s = attn_shape(a);
      if (op.softcap > 0.0f)
        a.fail(fmt::format(
            "the fused attention kernels here do not soft-cap scores (Gemma 2's "
            "attn_logit_softcapping {}): use --attention eager on cuda, or --no-execute",
            op.softcap));
      if (resolve_flash_impl(flash_impl_, dt) == FlashImpl::cudnn) {  // cuDNN or fail: no fallback
        cudnn_flash(a, s, dt);
        return;
      }
      FlashShape f{s.batch,    s.seq,      s.heads,
                   s.kv_heads, s.head_dim, static_cast<float>(op.dropout_p),
                   op.seed};
      if (fwd)
        launch_flash_fwd(dt, a.out[0].data, a.f32(a.out[1]), cptr(a.in[0]), f, st);
      else
        launch_flash_bwd(dt, a.out[0].data, a.workspace, a.workspace_bytes, cptr(a.in[0]),
                         cptr(a.in[1]), cptr(a.in[2]), a.f32(a.in[3]), f, st);
      return;
    }
    case OpKind::dropout_fwd:
      launch_dropout_fwd(dt, a.out[0].data, a.u8(a.out[1]), cptr(a.in[0]),
                         static_cast<float>(op.dropout_p), op.seed, a.in[0].tensor->elements(), st);
      return;
    case OpKind::dropout_bwd:
      launch_dropout_bwd(dt, a.out[0].data, cptr(a.in[0]), a.u8(a.in[1]),
                         static_cast<float>(op.dropout_p), a.in[0].tensor->elements(), st);
      return;
    case OpKind::add:
      if (a.in[0].tensor->elements() != a.in[1].tensor->elements())
        a.fail("add operands differ in size");
      // b may be a 16-bit branch beside an fp32 stream (autocast, QLoRA).
      launch_add(dt, a.out[0].data, cptr(a.in[0]), a.in[1].tensor->dtype, cptr(a.in[1]),
                 a.out[0].tensor->elements(), st);
      return;
    case OpKind::cross_entropy_fwd: {
      const DType logits_dt = a.in[0].tensor->dtype;
      launch_cross_entropy_fwd(logits_dt, a.f32(a.out[0]), a.f32(a.out[1]), cptr(a.in[0]),
                               a.i32(a.in[1]), rows(a.in[0]), last_dim(a.in[0]), st);
      return;
    }
    case OpKind::cross_entropy_bwd:
      launch_cross_entropy_bwd(dt, a.out[0].data, cptr(a.in[0]), a.i32(a.in[1]), a.f32(a.in[2]),
                               rows(a.in[0]), last_dim(a.in[0]), op.grad_scale, st);
      return;
    case OpKind::adamw_step:
    case OpKind::sgd_step:
      optimizer(a);
      return;
    case OpKind::dequantize:
      dequantize(a);
      return;
    case OpKind::linear_dgrad: {
      const LinearDims d = linear_dims(a);
      run_gemm(a, plan_linear_bwd_dx(d.M, d.In, d.Out), cptr(a.in[1]), cptr(a.in[0]),
               a.out[0].data);
      return;
    }
    case OpKind::lora_fwd:
      lora_fwd(a);
      return;
    case OpKind::lora_bwd:
      lora_bwd(a);
      return;
    case OpKind::adamw8bit_step:
      adamw_8bit(a);
      return;
    case OpKind::cast:
      if (a.in[0].tensor->elements() != a.out[0].tensor->elements())
        a.fail("cast operands differ in size");
      launch_cast(a.out[0].tensor->dtype, a.out[0].data, a.in[0].tensor->dtype, cptr(a.in[0]),
                  a.in[0].tensor->elements(), st);
      return;
  }
  a.fail("unknown op kind");
}

void CudaExecutor::attention(const Operands& a) {
  const Op& op = a.op;
  cudaStream_t st = stream_.get();
  const DType dt = a.dtype();
  switch (op.kind) {
    case OpKind::attn_scores: {
      const AttentionShape s = attn_shape(a);
      const GemmPlan plan = plan_attn_scores(s);
      // Scores of another dtype (autocast's fp32 mask promotes them): the GEMMs write the product
      // held with the op, in its dtype, which is cast into them.
      const Operand& scores = a.out[0];
      const DType scores_dt = scores.tensor->dtype;
      const Operand* product = scores_dt == dt ? &scores : a.held_like(dt, scores.tensor->shape);
      if (product == nullptr)
        a.fail(fmt::format(
            "'{}' is {} beside a {} product, and the op holds no {} tensor of its "
            "shape for the product",
            scores.tensor->name, dtype_name(scores_dt), dtype_name(dt), dtype_name(dt)));
      for (std::int64_t h = 0; h < s.heads; ++h)
        run_gemm(a, plan, offset(cptr(a.in[0]), s.k_offset(h), dt),
                 offset(cptr(a.in[0]), s.q_offset(h), dt),
                 offset(product->data, s.scores_offset(h), dt));
      if (product != &scores)
        launch_cast(scores_dt, scores.data, dt, product->data, scores.tensor->elements(), st);
      launch_causal_mask(scores_dt, scores.data, s.batch * s.heads, s.seq, st);
      return;
    }
    case OpKind::attn_values: {
      const AttentionShape s = attn_shape(a);
      const GemmPlan plan = plan_attn_values(s);
      for (std::int64_t h = 0; h < s.heads; ++h)
        run_gemm(a, plan, offset(cptr(a.in[1]), s.v_offset(h), dt),
                 offset(cptr(a.in[0]), s.scores_offset(h), dt),
                 offset(a.out[0].data, s.y_offset(h), dt));
      return;
    }
    case OpKind::attn_values_bwd: {
      const AttentionShape s = attn_shape(a);
      const auto es = static_cast<std::size_t>(dtype_size(dt));
      // The q and k columns of dqkv are written by attn_scores_bwd; zero them here as the contract
      // says, so that dqkv holds no stale values in between.
      VB_CUDA_CHECK(
          cudaMemset2DAsync(a.out[1].data, static_cast<std::size_t>(s.qkv_width()) * es, 0,
                            static_cast<std::size_t>((s.heads + s.kv_heads) * s.head_dim) * es,
                            static_cast<std::size_t>(s.batch * s.seq), st));
      const GemmPlan dprobs = plan_attn_values_bwd_dprobs(s);
      for (std::int64_t h = 0; h < s.heads; ++h) {
        run_gemm(a, dprobs, offset(cptr(a.in[2]), s.v_offset(h), dt),
                 offset(cptr(a.in[0]), s.y_offset(h), dt),
                 offset(a.out[0].data, s.scores_offset(h), dt));
        run_gemm(a, plan_attn_values_bwd_dv(s, s.first_of_group(h)),
                 offset(cptr(a.in[0]), s.y_offset(h), dt),
                 offset(cptr(a.in[1]), s.scores_offset(h), dt),
                 offset(a.out[1].data, s.v_offset(h), dt));
      }
      return;
    }
    case OpKind::attn_scores_bwd: {
      const AttentionShape s = attn_shape(a);
      if (a.out[0].data != a.in[2].data)  // keep the v part attn_values_bwd wrote
        VB_CUDA_CHECK(cudaMemcpyAsync(a.out[0].data, a.in[2].data,
                                      static_cast<std::size_t>(a.out[0].tensor->bytes),
                                      cudaMemcpyDeviceToDevice, st));
      const GemmPlan dq = plan_attn_scores_bwd_dq(s);
      for (std::int64_t h = 0; h < s.heads; ++h) {
        run_gemm(a, dq, offset(cptr(a.in[1]), s.k_offset(h), dt),
                 offset(cptr(a.in[0]), s.scores_offset(h), dt),
                 offset(a.out[0].data, s.q_offset(h), dt));
        run_gemm(a, plan_attn_scores_bwd_dk(s, s.first_of_group(h)),
                 offset(cptr(a.in[1]), s.q_offset(h), dt),
                 offset(cptr(a.in[0]), s.scores_offset(h), dt),
                 offset(a.out[0].data, s.k_offset(h), dt));
      }
      return;
    }
    default:
      a.fail("not an attention GEMM op");
  }
}

// flash_fwd / flash_bwd through cuDNN's fused attention (cudnn-frontend's sdpa nodes). Nothing
// else runs the op when cuDNN cannot: an unsupported dtype or shape, no plan, or a plan that needs
// more workspace than the op lists (a run may use only the memory its program lists) all throw,
// with cuDNN's or the frontend's message; an allocation failure inside them is CudaOutOfMemory,
// which execute() turns into DeviceOutOfMemory. The op's scratch tensor is cuDNN's workspace.
void CudaExecutor::cudnn_flash(const Operands& a, const AttentionShape& s, DType dt) {
  const Op& op = a.op;
  const bool fwd = op.kind == OpKind::flash_fwd;
  if (!cudnn_sdpa_) cudnn_sdpa_ = std::make_unique<CudnnSdpa>();
  const SdpaKey key{{s.batch, s.seq, s.heads, s.kv_heads, s.head_dim},
                    dt,
                    static_cast<float>(op.dropout_p),
                    fwd ? SdpaPass::forward : SdpaPass::backward};
  // The forward and the backward of one attention carry the same seed, so they drop alike.
  const SdpaRng rng{static_cast<std::int64_t>(op.seed), 0};
  if (fwd)
    cudnn_sdpa_->forward(a.out[0].data, a.f32(a.out[1]), cptr(a.in[0]), key, rng, a.workspace,
                         a.workspace_bytes, op.name.str(), stream_.get());
  else
    cudnn_sdpa_->backward(a.out[0].data, cptr(a.in[0]), cptr(a.in[1]), cptr(a.in[2]),
                          a.f32(a.in[3]), key, rng, a.workspace, a.workspace_bytes, op.name.str(),
                          stream_.get());
}

// A part of a quantised frozen weight: the module's weight drawn on the device by the init rule
// (the dense linear's rows), quantised by the launchers into scratch, the part copied out. The
// scratch is freed before the step starts; its values are bit for bit the cpu executor's.
void CudaExecutor::initialize_quantized(const Program& program, int tensor_id,
                                        const QuantizedPart& part, void* data) {
  const Tensor& t = program.tensor(tensor_id);
  cudaStream_t st = stream_.get();
  using Kind = QuantizedPart::Kind;
  if (part.kind == Kind::quant_map || part.kind == Kind::nested_quant_map) {
    std::vector<float> table(static_cast<std::size_t>(t.elements()));
    fill_code_table(part, table.data(), t.elements());
    VB_CUDA_CHECK(cudaMemcpyAsync(data, table.data(), table.size() * sizeof(float),
                                  cudaMemcpyHostToDevice, st));
    VB_CUDA_CHECK(cudaStreamSynchronize(st));
    return;
  }
  const std::int64_t n = part.rows * part.cols;
  const QuantizedWeightBytes bytes =
      quantized_weight_bytes(n, part.rows, part.quant, part.double_quant);
  const std::int64_t scales =
      part.quant == QuantKind::int8 ? part.rows : quant_blocks(n, kQuant4bitBlock);
  const Bytes absmax2_bytes =
      part.double_quant ? quant_blocks(scales, kQuantNestedBlock) * Bytes{4} : 0;
  // One scratch allocation: weight | codes | fp32 absmax | qabsmax | absmax2 | offset, each
  // 256-byte aligned.
  auto up = [](Bytes b) { return (b + 255) / 256 * 256; };
  const Bytes w_bytes = up(n * dtype_size(part.dtype)), codes_bytes = up(bytes.data),
              absmax_bytes = up(scales * Bytes{4}), q_bytes = up(part.double_quant ? scales : 0),
              a2_bytes = up(absmax2_bytes);
  const Bytes total = w_bytes + codes_bytes + absmax_bytes + q_bytes + a2_bytes + 256;
  void* scratch = nullptr;
  if (cudaMalloc(&scratch, total) != cudaSuccess) {
    (void)cudaGetLastError();
    throw DeviceOutOfMemory(fmt::format(
        "initialising '{}': no room for {} bytes of quantisation scratch", t.name, total));
  }
  char* base = static_cast<char*>(scratch);
  void* w = base;
  kquant::QuantizedWeightBuffers out;
  out.data = reinterpret_cast<std::uint8_t*>(base + w_bytes);
  out.absmax = reinterpret_cast<float*>(base + w_bytes + codes_bytes);
  if (part.double_quant) {
    out.qabsmax = reinterpret_cast<std::uint8_t*>(base + w_bytes + codes_bytes + absmax_bytes);
    out.absmax2 = reinterpret_cast<float*>(base + w_bytes + codes_bytes + absmax_bytes + q_bytes);
    out.offset =
        reinterpret_cast<float*>(base + w_bytes + codes_bytes + absmax_bytes + q_bytes + a2_bytes);
  }
  try {
    const kmath::InitRule rule = weight_init_rule(seed_, part.weight);
    // Rows [row_offset, +rows) of the dense weight: element i of the module is element
    // row_offset * cols + i of the weight's stream.
    launch_init_offset(w, part.dtype, n, rule, part.row_offset * part.cols, st);
    launch_quantize_weight(part.quant, part.double_quant, part.dtype, out, w, part.rows, part.cols,
                           st);
    const void* src = nullptr;
    Bytes size = 0;
    switch (part.kind) {
      case Kind::codes:
        src = out.data, size = bytes.data;
        break;
      case Kind::absmax:
        src = part.double_quant ? static_cast<const void*>(out.qabsmax) : out.absmax;
        size = part.double_quant ? scales : scales * Bytes{4};
        break;
      case Kind::absmax2:
        src = out.absmax2, size = absmax2_bytes;
        break;
      case Kind::offset:
        src = out.offset, size = 4;
        break;
      default:
        break;
    }
    if (src == nullptr || size != t.bytes)
      throw InternalError(
          fmt::format("quantised part '{}': {} bytes, the program has {}", t.name, size, t.bytes));
    VB_CUDA_CHECK(
        cudaMemcpyAsync(data, src, static_cast<std::size_t>(size), cudaMemcpyDeviceToDevice, st));
    VB_CUDA_CHECK(cudaStreamSynchronize(st));
  } catch (...) {
    (void)cudaStreamSynchronize(st);
    (void)cudaFree(scratch);
    throw;
  }
  VB_CUDA_CHECK(cudaFree(scratch));
}

// Rows [row_offset, +rows) of the compute-dtype weight from the quantised module.
void CudaExecutor::dequantize(const Operands& a) {
  const Op& op = a.op;
  const DequantizeOperands d = dequantize_operands(a);
  launch_dequantize_weight(op.quant, op.double_quant, a.out[0].tensor->dtype, d.rows, d.in, op.rows,
                           d.cols, stream_.get());
}

// xa = x a^T; y[:, col_offset:+N] += scale xa b^T: the second GEMM writes a column slice of y, so
// its C has leading dimension Out (y's row length), not N. With y of another dtype than the
// adapters (PEFT's fp32 adapters over a 16-bit layer, or autocast's 16-bit ones over QLoRA's fp32
// stream) the product goes into lora_B's output first and is added into y's columns in fp32,
// stored in y's dtype, as PEFT's `result + lora_B(...) * scaling` and its `.to()` do.
void CudaExecutor::lora_fwd(const Operands& a) {
  const LoraDims d = lora_dims(a);
  const DType dt = a.dtype();
  const Operand& y = a.out[1];
  const DType y_dt = y.tensor->dtype;
  run_gemm(a, plan_linear_fwd(d.M, d.In, d.R), cptr(a.in[1]), cptr(a.in[0]), a.out[0].data);
  GemmPlan up = plan_linear_fwd(d.M, d.R, d.N);
  up.alpha = a.op.lora_scale;
  void* y_cols = offset(y.data, a.op.col_offset, y_dt);
  if (const Operand* cols = lora_columns(a, d)) {
    run_gemm(a, up, cptr(a.in[2]), a.out[0].data, cols->data);
    launch_cast_rows(y_dt, y_cols, d.Out, dt, cols->data, d.N, d.M, d.N, true, stream_.get());
    return;
  }
  up.ldc = d.Out;
  up.beta = 1.0f;
  run_gemm(a, up, cptr(a.in[2]), a.out[0].data, y_cols);
}

// g = scale dy[:, cols]; db = g^T xa; dxa = g b; da = dxa^T x; dx (+)= dxa a. dy's column slice
// is read with leading dimension Out (or first cast into the op's dtype when dy is of another);
// the scale rides on alpha.
void CudaExecutor::lora_bwd(const Operands& a) {
  const LoraDims d = lora_dims(a);
  const DType dt = a.dtype();
  const DType dy_dt = a.in[0].tensor->dtype;
  const void* dy = offset(cptr(a.in[0]), a.op.col_offset, dy_dt);
  std::int64_t ld = d.Out;
  if (const Operand* cols = lora_columns(a, d)) {
    launch_cast_rows(dt, cols->data, d.N, dy_dt, dy, d.Out, d.M, d.N, false, stream_.get());
    dy = cols->data;
    ld = d.N;
  }
  GemmPlan db = plan_linear_bwd_dw(d.M, d.R, d.N, false);  // A = xa, B = dy slice, C = db
  db.ldb = ld;
  db.alpha = a.op.lora_scale;
  run_gemm(a, db, cptr(a.in[2]), dy, a.out[1].data);
  GemmPlan dxa = plan_linear_bwd_dx(d.M, d.R, d.N);  // A = b, B = dy slice, C = dxa
  dxa.ldb = ld;
  dxa.alpha = a.op.lora_scale;
  run_gemm(a, dxa, cptr(a.in[4]), dy, a.out[2].data);
  // A = x, B = dxa, C = da
  run_gemm(a, plan_linear_bwd_dw(d.M, d.In, d.R, false), cptr(a.in[1]), a.out[2].data,
           a.out[0].data);
  if (a.out.size() == 4) {
    GemmPlan dx = plan_linear_bwd_dx(d.M, d.In, d.R);  // A = a, B = dxa, C = dx
    dx.beta = a.op.accumulate ? 1.0f : 0.0f;           // into the frozen base's dx
    run_gemm(a, dx, cptr(a.in[3]), a.out[2].data, a.out[3].data);
  }
}

// bitsandbytes' 8-bit AdamW, in place on the weight, its master and the codes and absmax.
void CudaExecutor::adamw_8bit(const Operands& a) {
  const Operand& weight = a.in[0];
  const Operand* master = a.input("master");
  const kquant::AdamW8bitState state = adamw_8bit_state(a);
  if (a.in[1].tensor->dtype != weight.tensor->dtype) a.fail("grad and weight differ in dtype");
  launch_adamw_8bit(weight.tensor->dtype, weight.data, cptr(a.in[1]), state,
                    master ? a.f32(*master) : nullptr, adam_params(a.op, steps_.next(weight)),
                    weight.tensor->elements(), stream_.get());
}

// In place on the weight, its state (fp32 or the weight's dtype) and its fp32 master copy.
void CudaExecutor::optimizer(const Operands& a) {
  const OptimizerOperands o = optimizer_operands(a);
  const int step = steps_.next(a.in[0]);
  if (a.op.kind == OpKind::adamw_step)
    launch_adamw(o.dtype, o.state_dtype, o.w, o.grad, o.m, o.v, o.master, adam_params(a.op, step),
                 o.elements, stream_.get());
  else
    launch_sgd(o.dtype, o.state_dtype, o.w, o.grad, o.m, o.master, sgd_params(a.op), o.elements,
               stream_.get());
}

}  // namespace

std::unique_ptr<Executor> make_cuda_executor(std::uint64_t seed, FlashImpl flash) {
  std::string why;
  if (!cuda_available(&why)) throw NeedsGpu(why);
  return std::make_unique<CudaExecutor>(seed, flash);
}

}  // namespace vrambench
