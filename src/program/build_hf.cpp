// Builds the hf step program: what PyTorch eager autograd allocates when it runs Hugging Face
// transformers' GPT-2 (GPT2LMHeadModel) or Llama (LlamaForCausalLM) model code for one training
// step, with the loss the model computes from `labels`, optional gradient checkpointing
// (non-reentrant, per decoder layer) and the optimizer; under fine-tuning, PEFT's LoRA adapters
// over a frozen base (bitsandbytes' 4-bit layers under QLoRA), where only what requires grad keeps
// what its backward reads (hf_linears.h). docs/memory-model.md ("Frameworks") lists what each op
// keeps and where that comes from; tests/test_hf_reference.cpp checks the tensor peak against
// PyTorch's own count (tests/data/torch_reference.json).
//
// The kernels are the lean program's (a kernel's operands are the values its backward reads). What
// the framework keeps besides them, or in another form, is listed in Op::held: autograd's saved
// pieces of composite functions (the python tanh-GELU, RMSNorm's fp32 upcast, SiLU's output),
// reshape copies, key/value caches, dropout noise, casts. Where the framework keeps the same bytes
// in other storages than the kernel's operand (gpt2 keeps a query copy and the cached keys and
// values where the kernel keeps the packed q|k|v), the operand stands for them.
#include <fmt/format.h>

#include <cstdint>
#include <utility>
#include <vector>

#include "core/error.h"
#include "program/build_common.h"
#include "program/hf_linears.h"
#include "program/program.h"
#include "program/signature.h"

namespace vrambench {

// gpt2's eager attention: matmul folds a batch-1 query into its batches without a copy, so it
// saves a view of c_attn's output; from batch 2 it saves a copy. The fused kernel reads the
// query in place, and llama's query is a tensor of its own either way.
bool build_common::hf_query_is_a_view(const RunConfig& cfg, std::int64_t batch) {
  return cfg.model.arch != Arch::gpt || cfg.attention != Attention::eager || batch == 1;
}

namespace build_hf {
namespace {

using build_common::DropoutSite;
using build_common::stats_component;

// What a decoder layer's forward made that its backward reads, and what autograd holds beside.
struct HfBlockTensors {
  int layer = 0;
  int x_in = -1;
  int norm1_x = -1, norm1_out = -1, norm1_mean = -1, norm1_rstd = -1;
  LinearSaved qkv_saved;
  int qkv = -1;       // c_attn / q|k|v projection output
  int qkv_rot = -1;   // llama: after rope
  int attn_qkv = -1;  // what attention reads: qkv (gpt) or qkv_rot (llama), or autocast's copy
  int scores = -1, probs = -1, probs_c = -1, probs_drop = -1, probs_mask = -1, values_in = -1;
  int capped = -1;  // attention soft-capping (Gemma 2, eager)
  int y = -1, lse = -1;
  LinearSaved proj_saved;
  int proj_out = -1, proj_drop = -1, proj_mask = -1;
  int qk_normed = -1, qk_rstd = -1;  // qk_norm: what rope reads, and the heads' statistics
  TensorIds qk_held;                 // what the q/k norm's backward releases
  // sandwich_norms: the norms of the attention's and the MLP's outputs (input copy, output,
  // statistics).
  int post_attn_x = -1, post_attn_out = -1, post_attn_rstd = -1;
  int post_mlp_x = -1, post_mlp_out = -1, post_mlp_rstd = -1;
  TensorIds post_attn_held, post_mlp_held;
  int x_mid = -1;
  int norm2_x = -1, norm2_out = -1, norm2_mean = -1, norm2_rstd = -1;
  LinearSaved fc_saved, up_saved, out_saved;
  int fc_out = -1, gelu_in = -1, gelu_out = -1;  // gpt
  int up_out = -1, swiglu_out = -1;              // llama (fc_out is the gate's output)
  int mlp_out = -1, mlp_drop = -1, mlp_mask = -1;
  int x_out = -1;
  // Which of them require grad (all under full training; under fine-tuning what an adapter or a
  // checkpointed input reaches): the input, q|k|v, the attention's output projection, the
  // block's middle, the MLP's first linears (gate / fc, up), its activation and its output.
  bool x_in_grad = true, qkv_grad = true, proj_grad = true, x_mid_grad = true, fc_grad = true,
       up_grad = true, act_grad = true, mlp_grad = true;
  // Held by the backward ops that release them.
  TensorIds norm1_held, norm2_held, gelu_held, swiglu_held, attn_held, qkv_held, proj_held;
};

class HfBuilder : private HfLinears {
 public:
  HfBuilder(const RunConfig& cfg, Bytes gemm_workspace, const HfOptions& options)
      : HfLinears(cfg, gemm_workspace, options.device == HfOptions::Device::cpu) {
    if (!cpu_) per_thread_workspaces();
    eager_ = cfg.attention == Attention::eager;
    dropout_ = cfg.dropout > 0.0;
    fused_ = cfg.model.fused_linears;
    resid_dropout_ = dropout_ && (gpt_ || cfg.model.resid_dropout);
    ckpt_ = cfg.recompute == Recompute::full;
  }

  Program build() {
    build_model();
    add_optimizer();
    if (cfg_.loop == Loop::native && logits_ >= 0) p_.ops.back().held.push_back(logits_);
    return std::move(p_);
  }

 private:
  // ---- dtypes on the device -----------------------------------------------------------------

  // Dropout noise: CUDA's fused dropout keeps a byte mask; on the CPU, dropout multiplies by a
  // noise tensor of the input's dtype and keeps that.
  DType mask_dtype(int x) const { return cpu_ ? dtype_of(x) : DType::u8; }
  // Norm statistics: fp32 on CUDA; on the CPU, layer_norm returns them in the input's dtype.
  DType stats_dtype(int x) const { return cpu_ ? dtype_of(x) : DType::f32; }

  // ---- forward ------------------------------------------------------------------------------

  // gpt: nn.LayerNorm (saves x, mean, rstd). llama: LlamaRMSNorm, which upcasts x to fp32 (saved),
  // normalises in fp32, casts back (saved by the weight's multiply) and multiplies by the weight.
  // Under fine-tuning the weight is frozen: what its gradient reads is not kept, and nothing is
  // when x does not require grad (`x_grad`); the output is saved by whoever reads it.
  void norm_fwd(const Name& name, int x, const Param& w, const Param& b, const Pass& pass,
                int layer, bool x_grad, int& norm_x, int& out, int& mean, int& rstd,
                TensorIds& held) {
    const Role role = saved(pass);
    const Role x_role = x_grad ? role : Role::transient;
    const Role out_role = w.trainable() ? role : Role::transient;
    const DType x_dtype = dtype_of(x);
    if (gpt_) {
      norm_x = x;
      out = tensor(suffixed(pass, name + ".out"), bsh(), x_dtype, out_role);
      mean = tensor(suffixed(pass, name + ".mean"), {M_}, stats_dtype(x), x_role,
                    stats_component(pass.replay));
      rstd = tensor(suffixed(pass, name + ".rstd"), {M_}, stats_dtype(x), x_role,
                    stats_component(pass.replay));
      op(OpKind::layernorm_fwd, name, {x, w.w, b.w}, {out, mean, rstd}, layer, pass.replay);
      return;
    }
    norm_x = cast(x, DType::f32, name + ".x_f32", x_role, layer, pass.replay);
    if (norm_x == x && x_role == Role::activation) keep_for_backward(x, pass);
    out = tensor(suffixed(pass, name + ".out"), bsh(), x_dtype, out_role);
    mean = -1;
    rstd = tensor(suffixed(pass, name + ".rstd"), {M_}, DType::f32, x_role,
                  stats_component(pass.replay));
    Op& o =
        rms_attrs(op(OpKind::rmsnorm_fwd, name, {norm_x, w.w}, {out, rstd}, layer, pass.replay));
    rms_pieces(name, bsh(), x_dtype, out_role, pass, w.trainable(), o.held, held);
  }

  // What an RMSNorm of x (dtype `x_dtype`, `dims`) makes besides its operands, into `op_held`,
  // and what its weight's gradient reads, into `held`. x.pow(2) is a temporary. Llama's norm
  // casts the fp32 normalised x back (a temporary unless the model is fp32) and multiplies the
  // weight by it, which saves it; Gemma's multiplies the fp32 normalised x by (1 + w), saving it
  // in fp32, and casts the fp32 product back (a temporary unless the model is fp32).
  void rms_pieces(const Name& name, const Dims& dims, DType x_dtype, Role out_role,
                  const Pass& pass, bool trainable, TensorIds& op_held, TensorIds& held) {
    op_held.push_back(
        tensor(suffixed(pass, name + ".x_squared"), dims, DType::f32, Role::transient));
    const bool gemma = cfg_.model.offset_norms;
    if (x_dtype != DType::f32)
      op_held.push_back(tensor(suffixed(pass, name + (gemma ? ".product_f32" : ".normed_f32")),
                               dims, DType::f32, Role::transient));
    const int normed =
        tensor(suffixed(pass, name + ".normed"), dims, gemma ? DType::f32 : x_dtype, out_role);
    op_held.push_back(normed);
    if (trainable) held.push_back(normed);
  }

  // A sandwich norm (Gemma 2 and 3) of a branch's output x, whose input requires grad when
  // `x_grad`: its output is the residual add's alone.
  int post_norm_fwd(const Name& name, int x, const Param& w, const Pass& pass, int layer,
                    bool x_grad, int& norm_x, int& rstd, TensorIds& held) {
    int out = -1, mean = -1;
    norm_fwd(name, x, w, Param{}, pass, layer, x_grad, norm_x, out, mean, rstd, held);
    set_role(out, Role::transient);
    return out;
  }

  // The attention core from the q|k|v tensor the kernels read, into b.y.
  // `pass` keeps nothing when q|k|v do not require grad.
  void attention_fwd(const Name& pre, int l, int qkv, const Pass& pass, HfBlockTensors& b) {
    const Role role = saved(pass);
    const bool cache = !ckpt_;  // use_cache: transformers turns it off with checkpointing
    // Under autocast attention casts fp32 q|k|v (QLoRA's Linear4bit keeps its input's dtype) to
    // 16 bits and saves the copies; the cache keeps the fp32 keys and values through the forward.
    const DType cache_dtype = dtype_of(qkv);
    const bool cast_in = amp_ && dtype_of(qkv) != cdt_;
    if (cast_in) qkv = cast(qkv, cdt_, pre + "attn.qkv.autocast", role, l, pass.replay);
    b.attn_qkv = qkv;
    // gpt2: a query that matmul can fold into batches without a copy (batch 1) or that the fused
    // kernel reads in place is saved as a view of c_attn's output; else matmul saves a copy.
    const bool query_view = build_common::hf_query_is_a_view(cfg_, B_.size);
    TensorIds fwd_held;  // what only the forward of the core holds
    if (gpt_) {
      // The cache's keys and values are new tensors (DynamicLayer.update concatenates); attention
      // reads them and saves them. The packed q|k|v operand stands for the query storage and them
      // where the query is a copy; a viewed query keeps all of c_attn's output besides.
      if (cache && query_view) {
        const int kv = tensor(suffixed(pass, pre + "attn.kv_cache"), {2, B_, S_, H_}, cache_dtype,
                              cast_in ? Role::transient : role);
        if (!cast_in) b.attn_held.push_back(kv);
        fwd_held.push_back(kv);
      }
      if (!query_view)
        fwd_held.push_back(
            tensor(suffixed(pass, pre + "attn.qkv_copies"), {B_, S_, Q_}, cdt_, Role::transient));
    } else {
      // Llama: the cache's copies of k and v live through the forward; attention reads its
      // operand's q (rotated), k and v. Eager attention repeats grouped-query heads to A
      // (repeat_kv), each copy saved by its product: the heads beyond the first K are held, the
      // first K are the operand's. The fused kernel keeps the K heads as they are.
      if (cache)
        fwd_held.push_back(tensor(suffixed(pass, pre + "attn.kv_cache"), {2, B_, S_, K_ * D_},
                                  cache_dtype, Role::transient));
      if (A_ > K_ && eager_) {
        const int rep =
            tensor(suffixed(pass, pre + "attn.kv_repeat"), {2, B_, S_, (A_ - K_) * D_}, cdt_, role);
        b.attn_held.push_back(rep);
        fwd_held.push_back(rep);
      }
    }
    b.y = tensor(suffixed(pass, pre + "attn.y"), bs_ad(), cdt_, role);
    if (!eager_) {
      b.lse = tensor(suffixed(pass, pre + "attn.lse"), {B_, A_, S_}, DType::f32, role);
      const int scratch = tensor(suffixed(pass, pre + "attn.flash.scratch"),
                                 {flash_fwd_scratch_bytes()}, DType::u8, Role::workspace);
      // flash-attention 2 soft-caps inside the kernel.
      Op& o =
          op(OpKind::flash_fwd, pre + "attn.flash", {qkv}, {b.y, b.lse, scratch}, l, pass.replay);
      flash_attrs(o, l);
      o.held = fwd_held;
      if (mask_ >= 0) o.held.push_back(mask_);
      return;
    }
    // scores = q k^T, scaled (a second S x S tensor), plus the causal mask (in the model's dtype:
    // fp32 under autocast, which promotes the sum).
    const DType score_dtype = dtype_of(mask_) == DType::f32 ? DType::f32 : cdt_;
    const double cap = cfg_.model.attn_softcap;
    b.scores = tensor(suffixed(pass, pre + "attn.scores"), bass(), cap > 0.0 ? cdt_ : score_dtype,
                      Role::transient);
    Op& scores = gemm(OpKind::attn_scores, pre + "attn.scores", {qkv}, {b.scores}, l, pass.replay);
    attention_attrs(scores);
    scores.held = fwd_held;
    scores.held.push_back(
        tensor(suffixed(pass, pre + "attn.scores.unscaled"), bass(), cdt_, Role::transient));
    scores.held.push_back(mask_);
    int softmax_in = b.scores;
    if (cap > 0.0) {
      // Gemma 2: scores / cap (a temporary), tanh (its output saved: the capped tensor stands for
      // it), times cap, plus the mask (the softmax's input, in the mask's promoted dtype).
      b.capped = tensor(suffixed(pass, pre + "attn.scores_capped"), bass(), cdt_, role);
      Op& c = softcap_op(pre + "attn.softcap", b.scores, b.capped, l, cap, pass.replay);
      c.held = fwd_held;
      c.held.push_back(
          tensor(suffixed(pass, pre + "attn.softcap.div"), bass(), cdt_, Role::transient));
      c.held.push_back(tensor(suffixed(pass, pre + "attn.softcap.masked"), bass(), score_dtype,
                              Role::transient));
      softmax_in = b.capped;
    }
    // Softmax: gpt2 in the scores' dtype; llama asks for fp32 (an fp32 copy of 16-bit scores
    // first). Autocast on CUDA computes softmax in fp32 too.
    const bool f32_softmax = !gpt_ || (amp_ && !cpu_);
    const DType probs_dtype = f32_softmax ? DType::f32 : score_dtype;
    b.probs = tensor(suffixed(pass, pre + "attn.probs"), bass(), probs_dtype, role);
    Op& softmax =
        op(OpKind::softmax_fwd, pre + "attn.softmax", {softmax_in}, {b.probs}, l, pass.replay);
    if (score_dtype != probs_dtype)
      softmax.held.push_back(
          tensor(suffixed(pass, pre + "attn.scores.f32"), bass(), DType::f32, Role::transient));
    // .type(value.dtype) (gpt2) / .to(query.dtype) (llama): a 16-bit copy that the product with
    // V saves. Under autocast llama's query is fp32 (RoPE multiplies by fp32 cos and sin), so the
    // probabilities stay fp32 through dropout and the product's autocast makes the copy.
    const bool cast_late = amp_ && !gpt_;
    b.probs_c =
        cast_late ? b.probs : cast(b.probs, cdt_, pre + "attn.probs_c", role, l, pass.replay);
    int values_in = b.probs_c;
    if (dropout_) {
      b.probs_drop = tensor(suffixed(pass, pre + "attn.probs_drop"), bass(), dtype_of(b.probs_c),
                            cast_late ? Role::transient : role);
      b.probs_mask =
          tensor(suffixed(pass, pre + "attn.probs_mask"), bass(), mask_dtype(b.probs_c), role);
      dropout_attrs(op(OpKind::dropout_fwd, pre + "attn.probs_dropout", {b.probs_c},
                       {b.probs_drop, b.probs_mask}, l, pass.replay),
                    l, DropoutSite::attn_probs);
      values_in = b.probs_drop;
    }
    b.values_in = cast(values_in, cdt_, pre + "attn.values_in", role, l, pass.replay);
    values_in = b.values_in;
    Op& values =
        gemm(OpKind::attn_values, pre + "attn.values", {values_in, qkv}, {b.y}, l, pass.replay);
    attention_attrs(values);
    // The product's [B, A, S, D] output before transpose(1, 2).contiguous() makes b.y.
    values.held = fwd_held;
    values.held.push_back(
        tensor(suffixed(pass, pre + "attn.y.heads"), bs_ad(), cdt_, Role::transient));
  }

  // The q and k norms (Qwen3, Gemma 3) of q|k|v: each a norm of the model's kind over the heads'
  // D columns (q_norm(q_proj(x).view(...)), k_norm likewise), on the q and k parts, which require
  // grad with q|k|v. Returns what rope reads.
  int qk_norm_fwd(const Name& pre, int l, const BlockWeights& w, const Pass& pass,
                  const Pass& attn_pass, HfBlockTensors& b) {
    const Name name = pre + "attn.qk_norm";
    const DType x_dtype = dtype_of(b.qkv);
    const Role x_role = saved(attn_pass);
    const Role out_role = w.q_norm.w.trainable() ? x_role : Role::transient;
    const Dims qk{B_, S_, (A_ + K_) * D_};
    b.qk_normed = tensor(suffixed(pass, name + ".out"), {B_, S_, Q_}, x_dtype, Role::transient);
    b.qk_rstd = tensor(suffixed(pass, name + ".rstd"), {B_, S_, A_ + K_}, DType::f32, x_role,
                       stats_component(pass.replay));
    Op& o = qk_norm_op(name, b.qkv, w.q_norm.w, w.k_norm.w, b.qk_normed, b.qk_rstd, l, pass.replay);
    // The norms compute on an fp32 copy of q and k (x.to(float32); q|k|v itself where it is
    // fp32), which their backward reads. The backward kernel reads q|k|v, kept to it: q|k|v
    // stands for as many of the copy's bytes as it holds, a held tensor for the rest.
    keep_for_backward(b.qkv, attn_pass);
    if (x_dtype != DType::f32) {
      const std::int64_t rest =
          4 * (A_ + K_) * D_ - dtype_size(x_dtype) * Q_;  // per token; 2 A D in 16 bits
      const int x_f32 =
          tensor(suffixed(pass, name + ".x_f32.rest"), {B_, S_, rest}, DType::u8, x_role);
      o.held.push_back(x_f32);
      b.qk_held.push_back(x_f32);
    }
    rms_pieces(name, qk, x_dtype, out_role, pass, w.q_norm.w.trainable(), o.held, b.qk_held);
    return b.qk_normed;
  }
  // Its backward from the gradient of what rope read into the gradient of q|k|v: in fp32, then
  // cast back, as the norm's.
  int qk_norm_bwd(const Name& pre, int l, const BlockWeights& w, const HfBlockTensors& b,
                  int dnormed) {
    const int dqkv = grad_of(b.qkv);
    Op& o = qk_norm_bwd_op(pre + "attn.qk_norm.bwd", dnormed, b.qkv, w.q_norm.w, w.k_norm.w,
                           b.qk_rstd, dqkv, l);
    o.held = b.qk_held;
    if (dtype_of(b.qkv) != DType::f32)
      o.held.push_back(tensor(pre + "attn.qk_norm.bwd.scratch", {3, B_, S_, (A_ + K_) * D_},
                              DType::f32, Role::transient));
    return dqkv;
  }

  // A pass that keeps nothing (what does not require grad saves nothing), or `pass`.
  static Pass keeping(const Pass& pass, bool grad) {
    Pass p = pass;
    p.keep_block = p.keep_block && grad;
    return p;
  }

  // Decoder layer l from x_in (`x_in_grad`: whether it requires grad).
  HfBlockTensors block_fwd(int l, int x_in, const BlockWeights& w, const Pass& pass,
                           bool x_in_grad) {
    const Name pre = block_prefix(l);
    HfBlockTensors b;
    b.layer = l;
    b.x_in = x_in;
    b.x_in_grad = x_in_grad;
    b.qkv_grad = x_in_grad || !w.qkv.lora.empty() || w.qkv.trainable();
    b.proj_grad = b.qkv_grad || !w.proj.lora.empty() || w.proj.trainable();
    b.x_mid_grad = x_in_grad || b.proj_grad;
    b.fc_grad = b.x_mid_grad || !w.fc.lora.empty() || w.fc.trainable();
    b.up_grad = gpt_ || fused_ ? b.fc_grad : b.x_mid_grad || !w.up.lora.empty() || w.up.trainable();
    b.act_grad = b.fc_grad || b.up_grad;
    b.mlp_grad = b.act_grad || !w.out.lora.empty() || w.out.trainable();
    const Role role = saved(pass);
    const Pass attn_pass = keeping(pass, b.qkv_grad);
    norm_fwd(pre + (gpt_ ? "ln1" : "attn_norm"), x_in, w.norm1.w, w.norm1.b, pass, l, x_in_grad,
             b.norm1_x, b.norm1_out, b.norm1_mean, b.norm1_rstd, b.norm1_held);
    const DType qkv_dtype = out_dtype(w.qkv, b.norm1_out);
    b.qkv = tensor(suffixed(pass, pre + "attn.qkv"), {B_, S_, Q_}, qkv_dtype,
                   gpt_ && qkv_dtype == cdt_ ? saved(attn_pass) : Role::transient);
    b.qkv_saved = linear_fwd(w.qkv, b.norm1_out, b.qkv, l, pass, x_in_grad);
    if (!gpt_ && amp_ && w.qkv.trainable()) {
      // q_proj, k_proj and v_proj each cast the norm's fp32 output (autocast caches only
      // weights): two more 16-bit copies, each saved by its projection.
      const int more =
          tensor(suffixed(pass, pre + "attn.qkv.in.autocast.kv"), {2, B_, S_, H_}, cdt_, role);
      p_.ops.back().held.push_back(more);
      b.qkv_held.push_back(more);
    }
    int attn_in = b.qkv;
    if (cfg_.model.qk_norm) attn_in = qk_norm_fwd(pre, l, w, pass, attn_pass, b);
    if (!gpt_) {
      // RoPE: q * cos + rotate_half(q) * sin (and k): new tensors; only cos and sin are saved.
      b.qkv_rot =
          tensor(suffixed(pass, pre + "attn.qkv_rot"), {B_, S_, Q_}, cdt_, saved(attn_pass));
      Op& rope = op(OpKind::rope_fwd, pre + "attn.rope", {attn_in}, {b.qkv_rot}, l, pass.replay);
      attention_attrs(rope);
      const DType rope_dtype = amp_ ? DType::f32 : cdt_;
      rope.held.push_back(tensor(suffixed(pass, pre + "attn.rope.products"),
                                 {2, B_, S_, (A_ + K_) * D_}, rope_dtype, Role::transient));
      rope.held.push_back(cos_sin_);
      if (fused_) {
        // Phi-3's rope concatenates the rotated part with the part past its rotary dimension
        // (none here): a copy of the sum.
        rope.held.push_back(tensor(suffixed(pass, pre + "attn.rope.cat"), {B_, S_, (A_ + K_) * D_},
                                   rope_dtype, Role::transient));
        // Phi-3's v is a view of qkv_proj's output: where sdpa saves v as it is (no cache
        // copies it: checkpointing turns the cache off), the whole output stays until the
        // attention's backward. The rotated operand stands for v; the q and k columns are held.
        if (!eager_ && ckpt_) {
          const int viewed = tensor(suffixed(pass, pre + "attn.qkv.viewed"),
                                    {B_, S_, (A_ + K_) * D_}, dtype_of(b.qkv), saved(attn_pass));
          rope.held.push_back(viewed);
          b.attn_held.push_back(viewed);
        }
      }
      attn_in = b.qkv_rot;
    }
    attention_fwd(pre, l, attn_in, attn_pass, b);
    if (fused_ && !eager_ && w.proj.trainable()) {
      // sdpa's output takes its query's layout: Phi-3's rope makes the query a contiguous
      // [B, A, S, D] (a cat), so transpose(1, 2).contiguous() copies the output the kernel keeps
      // (b.y), and an o_proj that trains keeps the copy too. (PEFT's fp32 adapters keep their
      // cast of it instead, which they make themselves.)
      const int copy = tensor(suffixed(pass, pre + "attn.y.copy"), bs_ad(), cdt_, role);
      p_.ops.back().held.push_back(copy);
      b.proj_held.push_back(copy);
    }

    const Name& proj = w.proj.name;
    b.proj_out =
        tensor(suffixed(pass, proj + ".out"), bsh(), out_dtype(w.proj, b.y), Role::transient);
    b.proj_saved = linear_fwd(w.proj, b.y, b.proj_out, l, pass, b.qkv_grad);
    int residual = b.proj_out;
    if (resid_dropout_)
      residual = b.proj_drop = dropout_fwd(proj, b.proj_out, l, DropoutSite::attn_proj, pass,
                                           mask_dtype(b.proj_out), b.proj_mask);
    if (cfg_.model.sandwich_norms)
      residual = b.post_attn_out =
          post_norm_fwd(pre + "post_attn_norm", b.proj_out, w.post_attn_norm.w, pass, l,
                        b.proj_grad, b.post_attn_x, b.post_attn_rstd, b.post_attn_held);
    b.x_mid = tensor(suffixed(pass, pre + "x_mid"), bsh(), promoted(dtype_of(x_in), cdt_), role);
    op(OpKind::add, pre + "attn.residual", {x_in, residual}, {b.x_mid}, l, pass.replay);

    norm_fwd(pre + (gpt_ ? "ln2" : "mlp_norm"), b.x_mid, w.norm2.w, w.norm2.b, pass, l,
             b.x_mid_grad, b.norm2_x, b.norm2_out, b.norm2_mean, b.norm2_rstd, b.norm2_held);
    const Pass act_pass = keeping(pass, b.fc_grad);
    const Role act_role = saved(act_pass);
    if (gpt_) {
      b.fc_out =
          tensor(suffixed(pass, pre + "mlp.fc.out"), bsf(), out_dtype(w.fc, b.norm2_out), act_role);
      b.fc_saved = linear_fwd(w.fc, b.norm2_out, b.fc_out, l, pass, b.x_mid_grad);
      // gelu_new, a python composite: 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))). Autograd
      // saves x (by pow), tanh's output, 0.5 x and 1 + tanh (by the last product). Autocast on
      // CUDA runs pow in fp32: x's fp32 copy is saved and the tanh branch is fp32.
      const bool f32_branch = amp_ && !cpu_;
      b.gelu_in = f32_branch
                      ? cast(b.fc_out, DType::f32, pre + "mlp.fc.out.f32", act_role, l, pass.replay)
                      : b.fc_out;
      const DType branch = dtype_of(b.gelu_in);
      // The activation's output is saved by a proj that trains (or an adapter's copy of it).
      b.gelu_out = tensor(suffixed(pass, pre + "mlp.gelu.out"), bsf(), branch,
                          w.out.trainable() ? role : Role::transient);
      Op& gelu = op(OpKind::gelu_fwd, pre + "mlp.gelu", {b.gelu_in}, {b.gelu_out}, l, pass.replay);
      for (const char* piece : {"tanh", "one_plus_tanh"})
        b.gelu_held.push_back(
            tensor(suffixed(pass, pre + "mlp.gelu." + piece), bsf(), branch, act_role));
      b.gelu_held.push_back(
          tensor(suffixed(pass, pre + "mlp.gelu.half_x"), bsf(), dtype_of(b.fc_out), act_role));
      gelu.held = b.gelu_held;
      // x^3 and the sums before tanh: two alive at a time.
      gelu.held.push_back(tensor(suffixed(pass, pre + "mlp.gelu.scratch"), {2, B_, S_, F_}, branch,
                                 Role::transient));
      b.mlp_out = tensor(suffixed(pass, pre + "mlp.proj.out"), bsh(), out_dtype(w.out, b.gelu_out),
                         Role::transient);
      b.out_saved = linear_fwd(w.out, b.gelu_out, b.mlp_out, l, pass, b.act_grad);
    } else {
      // act_fn(gate) * up: SiLU saves its input, the product saves each factor when the other
      // requires grad; the product is saved by a down that trains (or an adapter's copy of it).
      // Phi-3's gate and up are halves of gate_up_proj's output (chunk: views), which either
      // save keeps whole.
      const Role up_role = saved(keeping(pass, b.fc_grad));
      const Role silu_role = saved(keeping(pass, b.up_grad));
      b.fc_out = tensor(suffixed(pass, w.fc.name + ".out"), fused_ ? Dims{B_, S_, 2 * F_} : bsf(),
                        out_dtype(w.fc, b.norm2_out), act_role);
      b.fc_saved = linear_fwd(w.fc, b.norm2_out, b.fc_out, l, pass, b.x_mid_grad);
      TensorIds in{b.fc_out};
      if (!fused_) {
        b.up_out = tensor(suffixed(pass, pre + "mlp.up.out"), bsf(), out_dtype(w.up, b.norm2_out),
                          up_role);
        b.up_saved = linear_fwd(w.up, b.norm2_out, b.up_out, l, pass, b.x_mid_grad);
        in.push_back(b.up_out);
      }
      const DType act = dtype_of(b.fc_out);
      b.swiglu_out = tensor(suffixed(pass, pre + "mlp.swiglu.out"), bsf(), act,
                            w.out.trainable() ? role : Role::transient);
      Op& swiglu = gate_attrs(op(OpKind::swiglu_fwd, pre + "mlp.swiglu", std::move(in),
                                 {b.swiglu_out}, l, pass.replay));
      const int silu = tensor(suffixed(pass, pre + "mlp.silu.out"), bsf(), act, silu_role);
      swiglu.held.push_back(silu);
      if (b.up_grad) b.swiglu_held.push_back(silu);
      b.mlp_out = tensor(suffixed(pass, pre + "mlp.down.out"), bsh(),
                         out_dtype(w.out, b.swiglu_out), Role::transient);
      b.out_saved = linear_fwd(w.out, b.swiglu_out, b.mlp_out, l, pass, b.act_grad);
    }
    int mlp_y = b.mlp_out;
    if (resid_dropout_)
      mlp_y = b.mlp_drop = dropout_fwd(w.out.name, b.mlp_out, l, DropoutSite::mlp_proj, pass,
                                       mask_dtype(b.mlp_out), b.mlp_mask);
    if (cfg_.model.sandwich_norms)
      mlp_y = b.post_mlp_out =
          post_norm_fwd(pre + "post_mlp_norm", b.mlp_out, w.post_mlp_norm.w, pass, l, b.mlp_grad,
                        b.post_mlp_x, b.post_mlp_rstd, b.post_mlp_held);
    // The block output is the next block's input: kept even when checkpointed.
    b.x_out = tensor(suffixed(pass, pre + "x_out"), bsh(), dtype_of(b.x_mid),
                     pass.replay ? Role::transient : Role::activation);
    op(OpKind::add, pre + "mlp.residual", {b.x_mid, mlp_y}, {b.x_out}, l, pass.replay);
    return b;
  }

  // ---- backward -----------------------------------------------------------------------------

  void norm_bwd(const Name& name, int dy, int norm_x, int x, const Param& w, const Param& b,
                int mean, int rstd, const TensorIds& held, int dx, int layer) {
    if (gpt_) {
      TensorIds out{dx};
      if (w.trainable()) out.insert(out.end(), {w.grad, b.grad});
      row_sum(OpKind::layernorm_bwd, name + ".bwd", {dy, x, w.w, mean, rstd}, std::move(out), layer)
          .held = held;
      return;
    }
    // RMSNorm's backward runs in fp32 on the upcast input, then casts dx back.
    const int dx_f32 = norm_x == x ? dx : grad_of(norm_x);
    TensorIds out{dx_f32};
    if (w.trainable()) out.push_back(w.grad);
    Op& o = rms_attrs(row_sum(OpKind::rmsnorm_bwd, name + ".bwd", {dy, norm_x, w.w, rstd},
                              std::move(out), layer));
    o.held = held;
    o.held.push_back(tensor(name + ".bwd.scratch", {2, B_, S_, H_}, DType::f32, Role::transient));
    if (dx_f32 != dx) op(OpKind::cast, name + ".x_f32.grad.cast", {dx_f32}, {dx}, layer);
  }

  int attention_bwd(const Name& pre, int l, int qkv, const HfBlockTensors& b, int dy) {
    const int dqkv = grad_of(qkv);
    if (!eager_) {
      const int scratch = tensor(pre + "attn.flash_bwd.scratch",
                                 {build_common::flash_bwd_scratch(B_, S_, A_, K_, D_, cdt_)},
                                 DType::u8, Role::workspace);
      Op& o =
          op(OpKind::flash_bwd, pre + "attn.flash.bwd", {dy, qkv, b.y, b.lse}, {dqkv, scratch}, l);
      flash_attrs(o, l);
      o.held = b.attn_held;
      return dqkv;
    }
    const int dvalues_in = grad_of(b.values_in);
    Op& values = gemm(OpKind::attn_values_bwd, pre + "attn.values.bwd", {dy, b.values_in, qkv},
                      {dvalues_in, dqkv}, l);
    attention_attrs(values);
    values.held = b.attn_held;
    const int dropped = b.probs_drop >= 0 ? b.probs_drop : b.probs_c;
    int ddropped = dvalues_in;
    if (dropped != b.values_in) {
      ddropped = grad_of(dropped);
      op(OpKind::cast, pre + "attn.values_in.grad.cast", {dvalues_in}, {ddropped}, l);
    }
    int dprobs_c = ddropped;
    if (dropout_) {
      dprobs_c = dropout_bwd(pre + "attn.probs", ddropped, b.probs_mask, b.probs_c, l,
                             DropoutSite::attn_probs);
    }
    int dprobs = dprobs_c;
    if (b.probs_c != b.probs) {
      dprobs = grad_of(b.probs);
      op(OpKind::cast, pre + "attn.probs_c.grad.cast", {dprobs_c}, {dprobs}, l);
    }
    const int dscores = grad_of(b.scores);
    softmax_bwd(pre, dprobs, b.probs, b.capped, dscores, l);
    // The engine casts a gradient to the dtype of the input it flows into: the masked scores are
    // fp32 under autocast (the mask's promotion) beside the 16-bit product of q and k, whose
    // backward reads the 16-bit copy once the fp32 gradient is gone.
    int dproduct = dscores;
    if (dtype_of(dscores) != dtype_of(qkv)) {
      dproduct = tensor(pre + "attn.scores.product.grad", dims_of(dscores), dtype_of(qkv),
                        Role::transient);
      op(OpKind::cast, pre + "attn.scores.grad.cast", {dscores}, {dproduct}, l);
    }
    attention_attrs(
        gemm(OpKind::attn_scores_bwd, pre + "attn.scores.bwd", {dproduct, qkv, dqkv}, {dqkv}, l));
    return dqkv;
  }

  // The residual's gradient entering a branch whose output projection is `site`: in the branch's
  // dtype (16-bit under autocast: a cast op named `cast`), then through its dropout, if any.
  int branch_grad(int dx, int out, int drop, int mask, const Name& cast, const Name& site,
                  int layer, DropoutSite where) {
    int d = dx;
    if (dtype_of(out) != dtype_of(dx)) {
      d = grad_of(drop >= 0 ? drop : out);
      op(OpKind::cast, cast, {dx}, {d}, layer);
    }
    if (drop >= 0) d = dropout_bwd(site, d, mask, out, layer, where);
    return d;
  }

  // A sandwich norm's backward: the residual's gradient in the norm output's dtype, through the
  // norm into the gradient of the branch output x (returned).
  int post_norm_bwd(const Name& name, int dresidual, int out, int norm_x, int x, const Param& w,
                    int rstd, const TensorIds& held, int layer) {
    const int dout =
        branch_grad(dresidual, out, -1, -1, name + ".out.grad.cast", "", layer, DropoutSite{});
    const int dx = grad_of(x);
    norm_bwd(name, dout, norm_x, x, w, Param{}, -1, rstd, held, dx, layer);
    return dx;
  }

  // The gradient of the block's input from the gradient of its output; under fine-tuning only
  // what requires grad gets a gradient, and where the input does not, the backward of the layer
  // ends below its first adapter (-1).
  int block_bwd(const HfBlockTensors& b, const BlockWeights& w, int dx_out) {
    const int l = b.layer;
    const Name pre = block_prefix(l);
    const Name norm1 = pre + (gpt_ ? "ln1" : "attn_norm");
    const Name norm2 = pre + (gpt_ ? "ln2" : "mlp_norm");

    int dnorm2_out = -1;
    if (b.mlp_grad) {
      int dmlp = -1;
      if (b.post_mlp_out >= 0) {
        dmlp = post_norm_bwd(pre + "post_mlp_norm", dx_out, b.post_mlp_out, b.post_mlp_x, b.mlp_out,
                             w.post_mlp_norm.w, b.post_mlp_rstd, b.post_mlp_held, l);
      } else {
        dmlp = branch_grad(dx_out, b.mlp_out, b.mlp_drop, b.mlp_mask, pre + "mlp.out.grad.cast",
                           w.out.name, l, DropoutSite::mlp_proj);
      }
      const int dact = linear_bwd(w.out, b.out_saved, dmlp, l);
      if (gpt_ && dact >= 0) {
        const int dgelu_in = grad_of(b.gelu_in);
        Op& gelu = op(OpKind::gelu_bwd, pre + "mlp.gelu.bwd", {dact, b.gelu_in}, {dgelu_in}, l);
        gelu.held = b.gelu_held;
        gelu.held.push_back(tensor(pre + "mlp.gelu.bwd.scratch", {2, B_, S_, F_},
                                   dtype_of(b.gelu_in), Role::transient));
        int dfc = dgelu_in;
        if (b.gelu_in != b.fc_out) {
          dfc = grad_of(b.fc_out);
          op(OpKind::cast, pre + "mlp.fc.out.f32.grad.cast", {dgelu_in}, {dfc}, l);
        }
        dnorm2_out = linear_bwd(w.fc, b.fc_saved, dfc, l);
      } else if (dact >= 0 && fused_) {
        // The product's and SiLU's gradients of up and gate, which chunk's backward
        // concatenates into the gradient of gate_up_proj's output.
        const int dgate_up = grad_of(b.fc_out);
        Op& swiglu = gate_attrs(
            op(OpKind::swiglu_bwd, pre + "mlp.swiglu.bwd", {dact, b.fc_out}, {dgate_up}, l));
        swiglu.held = b.swiglu_held;
        swiglu.held.push_back(tensor(pre + "mlp.swiglu.bwd.halves", {2, B_, S_, F_},
                                     dtype_of(b.fc_out), Role::transient));
        dnorm2_out = linear_bwd(w.fc, b.fc_saved, dgate_up, l);
      } else if (dact >= 0) {
        const int dgate = grad_of(b.fc_out), dup = grad_of(b.up_out);
        gate_attrs(op(OpKind::swiglu_bwd, pre + "mlp.swiglu.bwd", {dact, b.fc_out, b.up_out},
                      {dgate, dup}, l))
            .held = b.swiglu_held;
        const int dx_up = linear_bwd(w.up, b.up_saved, dup, l);
        const int dx_gate = linear_bwd(w.fc, b.fc_saved, dgate, l);
        if (dx_up >= 0 && dx_gate >= 0) {
          dnorm2_out = grad_of(b.norm2_out);
          op(OpKind::add, pre + "mlp.grad_sum.bwd", {dx_gate, dx_up}, {dnorm2_out}, l);
        }
      }
    }
    if (!b.x_mid_grad) return -1;
    int dx_mid = dx_out;
    if (dnorm2_out >= 0) {
      const int dnorm2_in = grad_named(norm2 + ".in.grad", b.x_mid);
      norm_bwd(norm2, dnorm2_out, b.norm2_x, b.x_mid, w.norm2.w, w.norm2.b, b.norm2_mean,
               b.norm2_rstd, b.norm2_held, dnorm2_in, l);
      dx_mid = grad_of(b.x_mid);
      op(OpKind::add, pre + "mlp.residual.bwd", {dx_out, dnorm2_in}, {dx_mid}, l);
    }

    if (b.proj_grad) {
      const Name& proj = w.proj.name;
      int dproj = -1;
      if (b.post_attn_out >= 0) {
        dproj =
            post_norm_bwd(pre + "post_attn_norm", dx_mid, b.post_attn_out, b.post_attn_x,
                          b.proj_out, w.post_attn_norm.w, b.post_attn_rstd, b.post_attn_held, l);
      } else {
        dproj = branch_grad(dx_mid, b.proj_out, b.proj_drop, b.proj_mask, proj + ".out.grad.cast",
                            proj, l, DropoutSite::attn_proj);
      }
      const int dy = linear_bwd(w.proj, b.proj_saved, dproj, l);
      for (int id : b.proj_held) p_.ops.back().held.push_back(id);
      if (dy >= 0) {
        int dqkv = attention_bwd(pre, l, b.attn_qkv, b, dy);
        const int rotated = gpt_ ? b.qkv : b.qkv_rot;
        if (b.attn_qkv != rotated) {  // autocast's copy of fp32 q|k|v
          const int d = grad_of(rotated);
          op(OpKind::cast, pre + "attn.qkv.autocast.grad.cast", {dqkv}, {d}, l);
          dqkv = d;
        }
        if (!gpt_) {
          const int rope_in = b.qk_normed >= 0 ? b.qk_normed : b.qkv;
          const int drope_in = grad_of(rope_in);
          Op& rope = op(OpKind::rope_bwd, pre + "attn.rope.bwd", {dqkv}, {drope_in}, l);
          attention_attrs(rope);
          rope.held.push_back(cos_sin_);
          dqkv = drope_in;
          if (b.qk_normed >= 0) dqkv = qk_norm_bwd(pre, l, w, b, dqkv);
        }
        const int dnorm1_out = linear_bwd(w.qkv, b.qkv_saved, dqkv, l);
        if (!b.qkv_held.empty()) p_.ops.back().held = b.qkv_held;
        if (dnorm1_out >= 0) {
          const int dnorm1_in = grad_named(norm1 + ".in.grad", b.x_in);
          norm_bwd(norm1, dnorm1_out, b.norm1_x, b.x_in, w.norm1.w, w.norm1.b, b.norm1_mean,
                   b.norm1_rstd, b.norm1_held, dnorm1_in, l);
          const int dx_in = grad_of(b.x_in);
          op(OpKind::add, pre + "attn.residual.bwd", {dx_mid, dnorm1_in}, {dx_in}, l);
          return dx_in;
        }
      }
    }
    return b.x_in_grad ? dx_mid : -1;
  }

  // ---- the model ----------------------------------------------------------------------------

  void build_model() {
    const ModelConfig& m = cfg_.model;
    loss_scale_ = step_loss_scale(cfg_);
    const int tokens = tensor("tokens", {B_, S_}, DType::i32, Role::input);
    const int targets = tensor("targets", {B_, S_}, DType::i32, Role::input);

    // Under fine-tuning every parameter of the model is frozen (the lm head is never a LoRA
    // target); the adapters are made with the block linears.
    const Train train = finetune_ ? Train::frozen : Train::full;
    auto param = [&](const Name& name, Shape shape) { return weight(name, shape, -1, train); };
    const ModelWeights description = model_weights(m, S_);
    ModelParams params;
    build_common::lay_out_embeddings(description, params, param);
    std::vector<BlockWeights> weights;
    for (int l = 0; l < static_cast<int>(m.layers); ++l)
      weights.push_back(block_weights(description.block, l));
    build_common::lay_out_head(description, params, param);
    const Param& wte = params.wte;
    const Param& wpe = params.wpe;
    const Param& final_w = params.final_norm.w;
    const Param& final_b = params.final_norm.b;
    Linear lm;
    lm.name = "lm_head";
    lm.w = params.lm_head;
    lm.out = V_;
    lm.in = H_;
    // The embedding output requires grad under full training, and under fine-tuning with
    // checkpointing: transformers' gradient_checkpointing_enable (and PEFT's
    // prepare_model_for_kbit_training) call enable_input_require_grads.
    const bool x0_grad = !finetune_ || ckpt_;

    // Shared inputs of every layer: the causal mask eager attention adds ([B, 1, S, S] in the
    // model's dtype; sdpa gets none without padding and runs causal, on real tensors: under
    // FakeTensorMode transformers cannot read the padding mask and makes one), llama's rotary cos
    // and sin ([S, D] each, in the residual stream's dtype). They live while a layer may still
    // run: through the forward, and with checkpointing through the last replay.
    if (eager_) mask_ = tensor("attn.causal_mask", {B_, 1, S_, S_}, wdt_, Role::transient);
    if (!gpt_) cos_sin_ = tensor("rope.cos_sin", {2, S_, D_}, wdt_, Role::activation);

    // Embeddings (not autocast: fp32 under autocast), then the embedding dropout.
    const int x0 = tensor("x0", bsh(), wdt_, x0_grad ? Role::activation : Role::transient);
    TensorIds embed_in{tokens, wte.w};
    if (gpt_) embed_in.push_back(wpe.w);
    int embed_out = x0, embed_mask = -1;
    if (dropout_ && gpt_) embed_out = tensor("embed.out", bsh(), wdt_, Role::transient);
    Op& embed =
        embed_attrs(op(OpKind::embedding_fwd, "embed", std::move(embed_in), {embed_out}, -1));
    // Gemma's scaled embedding: the lookup's output times sqrt(hidden), a new tensor.
    if (m.embed_scale) embed.held.push_back(tensor("embed.unscaled", bsh(), wdt_, Role::transient));
    // Token and position embeddings are separate tensors before their sum.
    // Under fine-tuning with input gradients the token embeddings are a leaf that requires grad,
    // which its AccumulateGrad node holds until the backward ends.
    const bool leaf = finetune_ && x0_grad;
    int embed_tokens = -1;
    if (gpt_)
      embed.held.push_back(embed_tokens = tensor("embed.tokens", bsh(), wdt_,
                                                 leaf ? Role::activation : Role::transient));
    if (dropout_ && gpt_) {
      embed_mask = tensor("embed.mask", bsh(), mask_dtype(embed_out), Role::activation,
                          MemoryComponent::embedding_dropout_mask);
      dropout_attrs(op(OpKind::dropout_fwd, "embed.dropout", {embed_out}, {x0, embed_mask}, -1), -1,
                    DropoutSite::embedding);
    }

    const Pass pass = forward_pass();
    std::vector<HfBlockTensors> blocks;
    int x = x0;
    bool x_grad = x0_grad;
    for (int l = 0; l < static_cast<int>(m.layers); ++l) {
      blocks.push_back(block_fwd(l, x, weights[static_cast<std::size_t>(l)], pass, x_grad));
      x = blocks.back().x_out;
      x_grad = blocks.back().x_mid_grad || blocks.back().mlp_grad;
    }

    const Name& final_name = params.final_norm.name;
    int final_x = -1, final_out = -1, final_mean = -1, final_rstd = -1;
    TensorIds final_held;
    norm_fwd(final_name, x, final_w, final_b, Pass{}, -1, x_grad, final_x, final_out, final_mean,
             final_rstd, final_held);
    constexpr MemoryComponent kLoss = MemoryComponent::logits_and_loss;
    logits_ = tensor("logits", {M_, V_}, cdt_, Role::activation, kLoss);
    // Final soft-capping (Gemma 2): logits / cap (a temporary), tanh (its output saved: the
    // model's logits stand for it), times cap; the lm head's output is the division's alone.
    const double cap = m.final_softcap;
    const int head_out =
        cap > 0.0 ? tensor("logits.uncapped", {M_, V_}, cdt_, Role::transient, kLoss) : logits_;
    const LinearSaved lm_saved = linear_fwd(lm, final_out, head_out, -1, Pass{}, x_grad);
    if (cap > 0.0)
      softcap_op("logits.softcap", head_out, logits_, -1, cap)
          .held.push_back(tensor("logits.softcap.div", {M_, V_}, cdt_, Role::transient, kLoss));
    // The loss (transformers' ForCausalLMLoss): logits.float(), then cross entropy, whose
    // log-softmax output (fp32, B S V) is saved. The fp32 logits stand for it.
    const int logits_f32 = cast(logits_, DType::f32, "logits.f32", Role::activation, -1, false);
    p_.tensors[static_cast<std::size_t>(logits_f32)].component = kLoss;
    const int loss = tensor("loss", {1}, DType::f32, Role::transient, kLoss);
    const int lse = tensor("ce.lse", {M_}, DType::f32, Role::activation, kLoss);
    Op& ce = op(OpKind::cross_entropy_fwd, "ce", {logits_f32, targets}, {loss, lse}, -1);
    // Autocast's cache of 16-bit weights lives until the autocast region (forward and loss) ends.
    ce.held = autocast_cache_;
    // The model's output object keeps the logits while its forward computes the loss, and the
    // log-softmax output is made beside the fp32 logits.
    if (logits_f32 != logits_) ce.held.push_back(logits_);
    ce.held.push_back(tensor("ce.log_softmax", {M_, V_}, DType::f32, Role::transient, kLoss));
    // Where the loss reads fp32 logits in place, they stand for its saved log-softmax output,
    // unless something else keeps them to the backward: the output object of the native loop, or
    // soft-capping's tanh, for whose output they stand. Then the log-probabilities are a tensor of
    // their own.
    if ((cfg_.loop == Loop::native || cap > 0.0) && logits_f32 == logits_)
      ce.held.push_back(log_probs_ =
                            tensor("ce.log_probs", {M_, V_}, DType::f32, Role::activation, kLoss));
    p_.loss_tensor = loss;

    // Backward: the log-softmax's gradient and the logits' (both fp32, B S V) before the cast,
    // on the autograd engine's thread.
    on_autograd_thread();
    const int dlogits_f32 = grad_of(logits_f32);
    Op& ce_bwd =
        op(OpKind::cross_entropy_bwd, "ce.bwd", {logits_f32, targets, lse}, {dlogits_f32}, -1);
    ce_bwd.grad_scale = loss_scale_;
    ce_bwd.held.push_back(
        tensor("ce.log_probs.grad", {M_, V_}, DType::f32, Role::transient, kLoss));
    if (log_probs_ >= 0) ce_bwd.held.push_back(log_probs_);
    int dlogits = dlogits_f32;
    if (logits_f32 != logits_) {
      dlogits = grad_of(logits_);
      op(OpKind::cast, "logits.f32.grad.cast", {dlogits_f32}, {dlogits}, -1);
    }
    if (head_out != logits_) {
      const int dhead = grad_of(head_out);
      softcap_bwd_op("logits.softcap.bwd", dlogits, logits_, dhead, -1, cap);
      dlogits = dhead;
    }
    // A tied weight's two gradients meet in autograd's input buffer of its AccumulateGrad: the lm
    // head's waits there through the whole backward, the embedding's joins it, and their sum
    // (a third [V, H] tensor) becomes .grad.
    Linear lm_target = lm;
    if (m.tied_embeddings && lm.trainable())
      lm_target.w.grad = tensor("wte.grad.lm_head", {V_, H_}, wdt_, Role::transient);
    const int dfinal_out = linear_bwd(lm_target, lm_saved, dlogits, -1);
    int dx = grad_of(x);
    norm_bwd(final_name, dfinal_out, final_x, x, final_w, final_b, final_mean, final_rstd,
             final_held, dx, -1);

    for (int l = static_cast<int>(m.layers) - 1; l >= 0 && dx >= 0; --l) {
      const BlockWeights& w = weights[static_cast<std::size_t>(l)];
      HfBlockTensors b = blocks[static_cast<std::size_t>(l)];
      if (ckpt_) b = block_fwd(l, b.x_in, w, replay_pass(), b.x_in_grad);
      dx = block_bwd(b, w, dx);
    }
    if (leaf && embed_tokens >= 0) p_.ops.back().held.push_back(embed_tokens);
    if (!wte.trainable()) return;  // fine-tuning: the embeddings are frozen

    int dembed = dx;
    if (embed_mask >= 0)
      dembed = dropout_bwd("embed", dx, embed_mask, embed_out, -1, DropoutSite::embedding);
    const int dwte_embed = m.tied_embeddings
                               ? tensor("wte.grad.embedding", {V_, H_}, wdt_, Role::transient)
                               : wte.grad;
    TensorIds embed_grads{dwte_embed};
    if (gpt_) embed_grads.push_back(wpe.grad);
    Op& embed_bwd = embed_attrs(
        row_sum(OpKind::embedding_bwd, "embed.bwd", {dembed, tokens}, std::move(embed_grads), -1));
    // The scaled embedding's backward: the gradient times sqrt(hidden), a new tensor.
    if (m.embed_scale)
      embed_bwd.held.push_back(tensor("embed.unscaled.grad", bsh(), wdt_, Role::transient));
    if (m.tied_embeddings)
      op(OpKind::add, "wte.grad.sum", {lm_target.w.grad, dwte_embed}, {wte.grad}, -1);
  }

  // ---- optimizer ----------------------------------------------------------------------------

  // torch.optim.AdamW: foreach on CUDA, whose step makes sqrt(exp_avg_sq) for every parameter at
  // once: _foreach_sqrt allocates one temporary per parameter, in the parameters' order, and the
  // list goes after the last update (the first and the last step op hold them all); the
  // single-tensor loop (CPU) makes sqrt(exp_avg_sq) and its quotient for one parameter at a time.
  // bitsandbytes' optimizers update each parameter in one kernel, in place: 8-bit state where the
  // parameter has it, 32-bit elsewhere.
  void add_optimizer() {
    if (cfg_.optimizer == Optimizer::none || params_.empty()) return;
    // The trainable parameters share a dtype: the model's, or the adapters' fp32.
    const DType dtype = dtype_of(params_.front().w);
    TensorIds foreach_temps;
    if (cfg_.optimizer == Optimizer::adamw && !cpu_)
      for (const Param& p : params_)
        foreach_temps.push_back(tensor(p_.tensor(p.w).name + ".exp_avg_sq.sqrt", {p.numel}, dtype,
                                       Role::transient, MemoryComponent::optimizer_temporaries));
    // torch.optim makes every parameter's state (_init_group) before it updates one: the first
    // step op holds it all, so that a run's first step makes it there, in the parameters' order.
    TensorIds state;
    if (cfg_.optimizer == Optimizer::adamw || cfg_.optimizer == Optimizer::sgd)
      for (const Param& p : params_)
        for (int id : {p.m, p.v, p.momentum})
          if (id >= 0) state.push_back(id);
    const Param* last = &params_.back();
    for (const Param& param : params_) {
      const Name name = p_.tensor(param.w).name + ".step";
      if (is_adamw(cfg_.optimizer)) {
        const bool eight_bit = param.m_absmax >= 0;
        TensorIds in{param.w, param.grad, param.m, param.v};
        if (eight_bit) in.insert(in.end(), {param.m_absmax, param.v_absmax});
        Op& o = op(eight_bit ? OpKind::adamw8bit_step : OpKind::adamw_step, name, std::move(in), {},
                   param.layer);
        o.grad_scale = loss_scale_;
        o.weight_decay = 0.01f;  // torch's AdamW default, and bitsandbytes'
        if (&param == &params_.front()) {
          o.held.insert(o.held.end(), state.begin(), state.end());
          // bitsandbytes moves its quantisation maps to the device at its first step.
          if (qmaps_ >= 0) o.held.push_back(qmaps_);
        }
        if (cfg_.optimizer != Optimizer::adamw) continue;
        if (foreach_temps.empty())
          o.held.push_back(tensor(name + ".denom", {2, param.numel}, dtype, Role::transient,
                                  MemoryComponent::optimizer_temporaries));
        else if (&param == &params_.front() || &param == last)
          o.held.insert(o.held.end(), foreach_temps.begin(), foreach_temps.end());
      } else {
        Op& o = op(OpKind::sgd_step, name, {param.w, param.grad, param.momentum}, {}, param.layer);
        o.grad_scale = loss_scale_;
        if (&param == &params_.front()) o.held.insert(o.held.end(), state.begin(), state.end());
      }
    }
  }

  bool eager_ = false, dropout_ = false, ckpt_ = false;
  bool fused_ = false;          // Phi-3: qkv_proj and gate_up_proj
  bool resid_dropout_ = false;  // dropout on both branches' outputs (gpt2, Phi-3)
  float loss_scale_ = 1.0f;
  int mask_ = -1, cos_sin_ = -1, logits_ = -1, log_probs_ = -1;
};

}  // namespace
}  // namespace build_hf

Program build_hf_program(const RunConfig& cfg, Bytes gemm_workspace, const HfOptions& options) {
  if (gemm_workspace < 0)
    throw InternalError(
        fmt::format("build_hf_program: negative GEMM workspace {}", gemm_workspace));
  if (framework_of(cfg) != Framework::hf || cfg.scope != Scope::model)
    throw InternalError("build_hf_program: a validated --framework hf whole-model configuration");
  Program program = build_hf::HfBuilder(cfg, gemm_workspace, options).build();
  // Accumulating over micro-steps, the .grad tensors are there before the step (liveness keeps
  // them whole-step), and autograd's AccumulateGrad adds each new gradient into its .grad in place
  // (torch/csrc/autograd/functions/accumulate_grad.h: `variable_grad += new_grad`): the new
  // gradient is a tensor of the .grad's size, made by the op that computes it and freed after the
  // add. In the first micro-step AccumulateGrad keeps new_grad as .grad and makes no copy; the
  // program is a later one.
  if (cfg.grad_accum > 1) {
    for (Op& op : program.ops) {
      TensorIds fresh;
      for (int id : op.outputs) {
        if (program.tensor(id).role != Role::grad) continue;
        // A copy: add_tensor grows the tensor list. A parameter's gradient holds no batch
        // dimension, so the new tensor adds none to batch_dims.
        const Tensor g = program.tensor(id);
        fresh.push_back(program.add_tensor(g.name + ".new", g.shape, g.dtype, Role::transient));
      }
      op.held.insert(op.held.end(), fresh.begin(), fresh.end());
    }
  }
  for (const Op& op : program.ops) check_op(program, op);
  return program;
}

}  // namespace vrambench
