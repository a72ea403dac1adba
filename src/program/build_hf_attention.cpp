// The hf builder's attention: the q|k|v projection, rotary embeddings, the attention core (sdpa's
// flash kernel or eager attention's products and softmax, with the key/value cache) and the output
// projection, forward and backward.
#include <cstdint>

#include "program/hf_builder.h"

namespace vrambench {

// gpt2's eager attention: matmul folds a batch-1 query into its batches without a copy, so it
// saves a view of c_attn's output; from batch 2 it saves a copy. The fused kernel reads the
// query in place, and llama's query is a tensor of its own either way. A DPO batch of one pair is
// two sequences.
bool build_common::hf_query_is_a_view(const RunConfig& cfg, std::int64_t batch) {
  return cfg.model.arch != Arch::gpt || cfg.attention != Attention::eager ||
         batch * rows_per_sample(cfg) == 1;
}

namespace build_hf {

// The q|k|v projection of the first norm's output into b.qkv, which the attention keeps where it
// reads it as it is (`keep`: gpt2's c_attn, unless it is of another dtype than the attention's).
void HfBuilder::qkv_fwd(const Name& pre, int l, const BlockWeights& w, const Pass& pass,
                        const Pass& attn_pass, bool keep, HfBlockTensors& b) {
  const DType qkv_dtype = out_dtype(w.qkv, b.norm1.out);
  b.qkv = tensor(suffixed(pass, pre + "attn.qkv"), {B_, S_, Q_}, qkv_dtype,
                 keep && qkv_dtype == cdt_ ? saved(attn_pass) : Role::transient);
  b.qkv_saved = linear_fwd(w.qkv, b.norm1.out, b.qkv, l, pass, b.x_in_grad);
}

// GPT2Attention: c_attn, the attention core over its packed output, c_proj.
void HfBuilder::gpt2_attention_fwd(const Name& pre, int l, const BlockWeights& w, const Pass& pass,
                                   HfBlockTensors& b) {
  const Pass attn_pass = keeping(pass, b.qkv_grad);
  qkv_fwd(pre, l, w, pass, attn_pass, true, b);
  attention_fwd(pre, l, b.qkv, attn_pass, b);
  proj_fwd(l, w, pass, b);
}

// LlamaAttention and those built on it: q_proj, k_proj and v_proj (Phi-3's qkv_proj), the q and
// k norms where the model has them, RoPE, the attention core, o_proj.
void HfBuilder::rotary_attention_fwd(const Name& pre, int l, const BlockWeights& w,
                                     const Pass& pass, HfBlockTensors& b) {
  const Role role = saved(pass);
  const Pass attn_pass = keeping(pass, b.qkv_grad);
  qkv_fwd(pre, l, w, pass, attn_pass, false, b);
  if (amp_ && w.qkv.trainable()) {
    // q_proj, k_proj and v_proj each cast the norm's fp32 output (autocast caches only
    // weights): two more 16-bit copies, each saved by its projection.
    const int more =
        tensor(suffixed(pass, pre + "attn.qkv.in.autocast.kv"), {2, B_, S_, H_}, cdt_, role);
    p_.ops.back().held.push_back(more);
    b.qkv_held.push_back(more);
  }
  int rope_in = b.qkv;
  if (cfg_.model.qk_norm) rope_in = qk_norm_fwd(pre, l, w, pass, attn_pass, b);
  attention_fwd(pre, l, rope_fwd(pre, l, rope_in, pass, attn_pass, b), attn_pass, b);
  if (fused_ && !eager_ && w.proj.trainable()) {
    // sdpa's output takes its query's layout: Phi-3's rope makes the query a contiguous
    // [B, A, S, D] (a cat), so transpose(1, 2).contiguous() copies the output the kernel keeps
    // (b.y), and an o_proj that trains keeps the copy too. (PEFT's fp32 adapters keep their
    // cast of it instead, which they make themselves.)
    const int copy = tensor(suffixed(pass, pre + "attn.y.copy"), bs_ad(), cdt_, role);
    p_.ops.back().held.push_back(copy);
    b.proj_held.push_back(copy);
  }
  proj_fwd(l, w, pass, b);
}

// RoPE of x (q|k|v, or its q and k norms' output) into b.qkv_rot, returned:
// q * cos + rotate_half(q) * sin (and k): new tensors; only cos and sin are saved.
int HfBuilder::rope_fwd(const Name& pre, int l, int x, const Pass& pass, const Pass& attn_pass,
                        HfBlockTensors& b) {
  b.qkv_rot = tensor(suffixed(pass, pre + "attn.qkv_rot"), {B_, S_, Q_}, cdt_, saved(attn_pass));
  Op& rope = op(OpKind::rope_fwd, pre + "attn.rope", {x}, {b.qkv_rot}, l, pass.recompute);
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
      const int viewed = tensor(suffixed(pass, pre + "attn.qkv.viewed"), {B_, S_, (A_ + K_) * D_},
                                dtype_of(b.qkv), saved(attn_pass));
      rope.held.push_back(viewed);
      b.attn_held.push_back(viewed);
    }
  }
  return b.qkv_rot;
}

// The attention core from the q|k|v tensor the kernels read, into b.y.
// `pass` keeps nothing when q|k|v do not require grad.
void HfBuilder::attention_fwd(const Name& pre, int l, int qkv, const Pass& pass,
                              HfBlockTensors& b) {
  const Role role = saved(pass);
  // use_cache: transformers turns it off with checkpointing, and TRL's preference trainers pass
  // use_cache=False.
  const bool cache = !ckpt_ && !is_preference(cfg_);
  // Under autocast attention casts fp32 q|k|v (QLoRA's Linear4bit keeps its input's dtype) to
  // 16 bits and saves the copies; the cache keeps the fp32 keys and values through the forward.
  const DType cache_dtype = dtype_of(qkv);
  const bool cast_in = amp_ && dtype_of(qkv) != cdt_;
  if (cast_in) qkv = cast(qkv, cdt_, pre + "attn.qkv.autocast", role, l, pass.recompute);
  b.attn_qkv = qkv;
  // gpt2: a query that matmul can fold into batches without a copy (batch 1) or that the fused
  // kernel reads in place is saved as a view of c_attn's output; else matmul saves a copy.
  const bool query_view = build_common::hf_query_is_a_view(cfg_, cfg_.batch);
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
    // first K are the operand's. The fused kernel keeps the K heads as they are (enable_gqa),
    // but where the layer gets a mask, which sdpa takes with grouped heads only as copies: then
    // the copies are its operands, except with one key/value head, whose repeat is a view.
    if (cache)
      fwd_held.push_back(tensor(suffixed(pass, pre + "attn.kv_cache"), {2, B_, S_, K_ * D_},
                                cache_dtype, Role::transient));
    if (A_ > K_ && (eager_ || (K_ > 1 && sliding_mask_at(cfg_.model, l, S_)))) {
      const int rep =
          tensor(suffixed(pass, pre + "attn.kv_repeat"), {2, B_, S_, (A_ - K_) * D_}, cdt_, role);
      b.attn_held.push_back(rep);
      fwd_held.push_back(rep);
    }
  }
  b.y = tensor(suffixed(pass, pre + "attn.y"), bs_ad(), cdt_, role);
  if (eager_) {
    eager_attention_fwd(pre, l, qkv, pass, fwd_held, b);
    return;
  }
  // A sliding-window layer's mask: sdpa makes an additive one of the boolean, in q's dtype, over
  // the batch the boolean is expanded to ([B, 1, S, S]: zeros_like of an expanded tensor is
  // dense), which the fused kernel saves for its backward.
  if (sliding_mask_at(cfg_.model, l, S_)) {
    const int bias = tensor(suffixed(pass, pre + "attn.mask_bias"), {B_, 1, S_, S_}, dtype_of(qkv),
                            role, MemoryComponent::attention_masks);
    b.attn_held.push_back(bias);
    fwd_held.push_back(bias);
    fwd_held.push_back(sliding_mask_);
  }
  b.lse = tensor(suffixed(pass, pre + "attn.lse"), {B_, A_, S_}, DType::f32, role);
  const int scratch = tensor(suffixed(pass, pre + "attn.flash.scratch"),
                             {flash_fwd_scratch_bytes()}, DType::u8, Role::workspace);
  // flash-attention 2 soft-caps inside the kernel.
  Op& o =
      op(OpKind::flash_fwd, pre + "attn.flash", {qkv}, {b.y, b.lse, scratch}, l, pass.recompute);
  flash_attrs(o, l);
  o.held = fwd_held;
  if (mask_ >= 0) o.held.push_back(mask_);
}

// Eager attention's products, soft-capping, softmax and dropout from q|k|v into b.y; every op
// of the core holds `fwd_held` (the key/value cache and copies).
void HfBuilder::eager_attention_fwd(const Name& pre, int l, int qkv, const Pass& pass,
                                    const TensorIds& fwd_held, HfBlockTensors& b) {
  const Role role = saved(pass);
  // scores = q k^T, scaled (a second S x S tensor), plus the causal mask (in the model's dtype:
  // fp32 under autocast, which promotes the sum).
  const DType score_dtype = dtype_of(mask_) == DType::f32 ? DType::f32 : cdt_;
  const double cap = cfg_.model.attn_softcap;
  b.scores = tensor(suffixed(pass, pre + "attn.scores"), bass(), cap > 0.0 ? cdt_ : score_dtype,
                    Role::transient);
  Op& scores = gemm(OpKind::attn_scores, pre + "attn.scores", {qkv}, {b.scores}, l, pass.recompute);
  attention_attrs(scores);
  scores.held = fwd_held;
  scores.held.push_back(
      tensor(suffixed(pass, pre + "attn.scores.unscaled"), bass(), cdt_, Role::transient));
  // The layer's mask. A model with a mask per kind of layer holds both through the forward; a
  // recompute keeps only those its layers read.
  const bool sliding = sliding_mask_ >= 0 && sliding_layer(cfg_.model, l);
  scores.held.push_back(sliding ? sliding_mask_ : mask_);
  if (sliding_mask_ >= 0 && !pass.recompute) scores.held.push_back(sliding ? mask_ : sliding_mask_);
  int softmax_in = b.scores;
  if (cap > 0.0) {
    // Gemma 2: scores / cap (a temporary), tanh (its output saved: the capped tensor stands for
    // it), times cap, plus the mask (the softmax's input, in the mask's promoted dtype).
    b.capped = tensor(suffixed(pass, pre + "attn.scores_capped"), bass(), cdt_, role);
    Op& c = softcap_op(pre + "attn.softcap", b.scores, b.capped, l, cap, pass.recompute);
    c.held = fwd_held;
    c.held.push_back(
        tensor(suffixed(pass, pre + "attn.softcap.div"), bass(), cdt_, Role::transient));
    c.held.push_back(
        tensor(suffixed(pass, pre + "attn.softcap.masked"), bass(), score_dtype, Role::transient));
    softmax_in = b.capped;
  }
  // Softmax: gpt2 in the scores' dtype; llama asks for fp32 (an fp32 copy of 16-bit scores
  // first). Autocast on CUDA computes softmax in fp32 too.
  const bool f32_softmax = !gpt_ || (amp_ && !cpu_);
  const DType probs_dtype = f32_softmax ? DType::f32 : score_dtype;
  b.probs = tensor(suffixed(pass, pre + "attn.probs"), bass(), probs_dtype, role);
  Op& softmax =
      op(OpKind::softmax_fwd, pre + "attn.softmax", {softmax_in}, {b.probs}, l, pass.recompute);
  if (score_dtype != probs_dtype)
    softmax.held.push_back(
        tensor(suffixed(pass, pre + "attn.scores.f32"), bass(), DType::f32, Role::transient));
  // .type(value.dtype) (gpt2) / .to(query.dtype) (llama): a 16-bit copy that the product with
  // V saves. Under autocast llama's query is fp32 (RoPE multiplies by fp32 cos and sin), so the
  // probabilities stay fp32 through dropout and the product's autocast makes the copy.
  const bool cast_late = amp_ && !gpt_;
  b.probs_c =
      cast_late ? b.probs : cast(b.probs, cdt_, pre + "attn.probs_c", role, l, pass.recompute);
  int values_in = b.probs_c;
  if (dropout_) {
    b.probs_drop = tensor(suffixed(pass, pre + "attn.probs_drop"), bass(), dtype_of(b.probs_c),
                          cast_late ? Role::transient : role);
    b.probs_mask =
        tensor(suffixed(pass, pre + "attn.probs_mask"), bass(), mask_dtype(b.probs_c), role);
    dropout_attrs(op(OpKind::dropout_fwd, pre + "attn.probs_dropout", {b.probs_c},
                     {b.probs_drop, b.probs_mask}, l, pass.recompute),
                  l, DropoutSite::attn_probs);
    values_in = b.probs_drop;
  }
  b.values_in = cast(values_in, cdt_, pre + "attn.values_in", role, l, pass.recompute);
  values_in = b.values_in;
  Op& values =
      gemm(OpKind::attn_values, pre + "attn.values", {values_in, qkv}, {b.y}, l, pass.recompute);
  attention_attrs(values);
  // The product's [B, A, S, D] output before transpose(1, 2).contiguous() makes b.y.
  values.held = fwd_held;
  values.held.push_back(
      tensor(suffixed(pass, pre + "attn.y.heads"), bs_ad(), cdt_, Role::transient));
}

// The attention's output projection (c_proj, o_proj) of b.y into b.proj_out.
void HfBuilder::proj_fwd(int l, const BlockWeights& w, const Pass& pass, HfBlockTensors& b) {
  b.proj_out =
      tensor(suffixed(pass, w.proj.name + ".out"), bsh(), out_dtype(w.proj, b.y), Role::transient);
  b.proj_saved = linear_fwd(w.proj, b.y, b.proj_out, l, pass, b.qkv_grad);
}

// The attention's backward from the gradient of its output projection's output to the gradient
// of the first norm's output (-1 where none flows that far: below the first adapter).
int HfBuilder::attention_branch_bwd(const HfBlockTensors& b, const BlockWeights& w, int dproj) {
  const int l = b.layer;
  const Name pre = block_prefix(l);
  const int dy = linear_bwd(w.proj, b.proj_saved, dproj, l);
  for (int id : b.proj_held) p_.ops.back().held.push_back(id);
  if (dy < 0) return -1;
  int dqkv = attention_bwd(pre, l, b.attn_qkv, b, dy);
  const bool rotary = b.qkv_rot >= 0;
  const int rotated = rotary ? b.qkv_rot : b.qkv;
  if (b.attn_qkv != rotated) {  // autocast's copy of fp32 q|k|v
    const int d = grad_of(rotated);
    op(OpKind::cast, pre + "attn.qkv.autocast.grad.cast", {dqkv}, {d}, l);
    dqkv = d;
  }
  if (rotary) dqkv = rope_bwd(pre, l, w, b, dqkv);
  const int dnorm1_out = linear_bwd(w.qkv, b.qkv_saved, dqkv, l);
  if (!b.qkv_held.empty()) p_.ops.back().held = b.qkv_held;
  return dnorm1_out;
}

// RoPE's backward, then the q and k norms', into the gradient of q|k|v.
int HfBuilder::rope_bwd(const Name& pre, int l, const BlockWeights& w, const HfBlockTensors& b,
                        int dqkv) {
  const int rope_in = b.qk_normed >= 0 ? b.qk_normed : b.qkv;
  const int drope_in = grad_of(rope_in);
  Op& rope = op(OpKind::rope_bwd, pre + "attn.rope.bwd", {dqkv}, {drope_in}, l);
  attention_attrs(rope);
  rope.held.push_back(cos_sin_);
  if (b.qk_normed >= 0) return qk_norm_bwd(pre, l, w, b, drope_in);
  return drope_in;
}

int HfBuilder::attention_bwd(const Name& pre, int l, int qkv, const HfBlockTensors& b, int dy) {
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
    dproduct =
        tensor(pre + "attn.scores.product.grad", dims_of(dscores), dtype_of(qkv), Role::transient);
    op(OpKind::cast, pre + "attn.scores.grad.cast", {dscores}, {dproduct}, l);
  }
  attention_attrs(
      gemm(OpKind::attn_scores_bwd, pre + "attn.scores.bwd", {dproduct, qkv, dqkv}, {dqkv}, l));
  return dqkv;
}

}  // namespace build_hf
}  // namespace vrambench
