// The hf builder's norms: GPT-2's nn.LayerNorm, the llama family's RMSNorm (Gemma's with its
// (1 + w) weight), Gemma's sandwich norms and the q and k norms of Qwen3 and Gemma 3, forward and
// backward, and a residual add's backward through the norm that read its stream.
#include <cstdint>
#include <utility>

#include "program/hf_builder.h"

namespace vrambench::build_hf {

// gpt: nn.LayerNorm (saves x, mean, rstd). llama: LlamaRMSNorm, which upcasts x to fp32 (saved),
// normalises in fp32, casts back (saved by the weight's multiply) and multiplies by the weight.
// Under fine-tuning the weight is frozen: what its gradient reads is not kept, and nothing is
// when x does not require grad (`x_grad`); the output is saved by whoever reads it.
HfNormSaved HfBuilder::norm_fwd(const Norm& norm, int x, const Pass& pass, int layer, bool x_grad) {
  return gpt_ ? layer_norm_fwd(norm, x, pass, layer, x_grad)
              : rms_norm_fwd(norm, x, pass, layer, x_grad);
}

HfNormSaved HfBuilder::layer_norm_fwd(const Norm& norm, int x, const Pass& pass, int layer,
                                      bool x_grad) {
  const Role role = saved(pass);
  const Role x_role = x_grad ? role : Role::transient;
  const Role out_role = norm.w.trainable() ? role : Role::transient;
  const Name& name = norm.name;
  HfNormSaved s;
  s.x = x;
  s.out = tensor(suffixed(pass, name + ".out"), bsh(), dtype_of(x), out_role);
  s.mean = tensor(suffixed(pass, name + ".mean"), {M_}, stats_dtype(x), x_role,
                  stats_component(pass.recompute));
  s.rstd = tensor(suffixed(pass, name + ".rstd"), {M_}, stats_dtype(x), x_role,
                  stats_component(pass.recompute));
  op(OpKind::layernorm_fwd, name, {x, norm.w.w, norm.b.w}, {s.out, s.mean, s.rstd}, layer,
     pass.recompute);
  return s;
}

HfNormSaved HfBuilder::rms_norm_fwd(const Norm& norm, int x, const Pass& pass, int layer,
                                    bool x_grad) {
  const Role role = saved(pass);
  const Role x_role = x_grad ? role : Role::transient;
  const Role out_role = norm.w.trainable() ? role : Role::transient;
  const DType x_dtype = dtype_of(x);
  const Name& name = norm.name;
  HfNormSaved s;
  s.x = cast(x, DType::f32, name + ".x_f32", x_role, layer, pass.recompute);
  if (s.x == x && x_role == Role::activation) keep_for_backward(x, pass);
  s.out = tensor(suffixed(pass, name + ".out"), bsh(), x_dtype, out_role);
  s.rstd = tensor(suffixed(pass, name + ".rstd"), {M_}, DType::f32, x_role,
                  stats_component(pass.recompute));
  Op& o = rms_attrs(
      op(OpKind::rmsnorm_fwd, name, {s.x, norm.w.w}, {s.out, s.rstd}, layer, pass.recompute));
  rms_pieces(name, bsh(), x_dtype, out_role, pass, norm.w.trainable(), o.held, s.held);
  return s;
}

// What an RMSNorm of x (dtype `x_dtype`, `dims`) makes besides its operands, into `op_held`,
// and what its weight's gradient reads, into `held`. x.pow(2) is a temporary. Llama's norm
// casts the fp32 normalised x back (a temporary unless the model is fp32) and multiplies the
// weight by it, which saves it; Gemma's multiplies the fp32 normalised x by (1 + w), saving it
// in fp32, and casts the fp32 product back (a temporary unless the model is fp32).
void HfBuilder::rms_pieces(const Name& name, const Dims& dims, DType x_dtype, Role out_role,
                           const Pass& pass, bool trainable, TensorIds& op_held, TensorIds& held) {
  op_held.push_back(tensor(suffixed(pass, name + ".x_squared"), dims, DType::f32, Role::transient));
  const bool gemma = cfg_.model.offset_norms;
  if (x_dtype != DType::f32)
    op_held.push_back(tensor(suffixed(pass, name + (gemma ? ".product_f32" : ".normed_f32")), dims,
                             DType::f32, Role::transient));
  const int normed =
      tensor(suffixed(pass, name + ".normed"), dims, gemma ? DType::f32 : x_dtype, out_role);
  op_held.push_back(normed);
  if (trainable) held.push_back(normed);
}

// A sandwich norm (Gemma 2 and 3) of a branch's output x, whose input requires grad when
// `x_grad`: its output is the residual add's alone.
HfNormSaved HfBuilder::post_norm_fwd(const Norm& norm, int x, const Pass& pass, int layer,
                                     bool x_grad) {
  HfNormSaved s = rms_norm_fwd(norm, x, pass, layer, x_grad);
  set_role(s.out, Role::transient);
  return s;
}

// The q and k norms (Qwen3, Gemma 3) of q|k|v: each a norm of the model's kind over the heads'
// D columns (q_norm(q_proj(x).view(...)), k_norm likewise), on the q and k parts, which require
// grad with q|k|v. Returns what rope reads.
int HfBuilder::qk_norm_fwd(const Name& pre, int l, const BlockWeights& w, const Pass& pass,
                           const Pass& attn_pass, HfBlockTensors& b) {
  const Name name = pre + "attn.qk_norm";
  const DType x_dtype = dtype_of(b.qkv);
  const Role x_role = saved(attn_pass);
  const Role out_role = w.q_norm.w.trainable() ? x_role : Role::transient;
  const Dims qk{B_, S_, (A_ + K_) * D_};
  b.qk_normed = tensor(suffixed(pass, name + ".out"), {B_, S_, Q_}, x_dtype, Role::transient);
  b.qk_rstd = tensor(suffixed(pass, name + ".rstd"), {B_, S_, qk_norm_rows()}, DType::f32, x_role,
                     stats_component(pass.recompute));
  Op& o =
      qk_norm_op(name, b.qkv, w.q_norm.w, w.k_norm.w, b.qk_normed, b.qk_rstd, l, pass.recompute);
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
int HfBuilder::qk_norm_bwd(const Name& pre, int l, const BlockWeights& w, const HfBlockTensors& b,
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

// The norm's backward from the gradient of its output `dy` into `dx`, the gradient of its input
// x. RMSNorm's runs in fp32 on the upcast input, then casts dx back.
void HfBuilder::norm_bwd(const Norm& norm, const HfNormSaved& s, int dy, int x, int dx, int layer) {
  const Name& name = norm.name;
  const Param& w = norm.w;
  if (gpt_) {
    TensorIds out{dx};
    if (w.trainable()) out.insert(out.end(), {w.grad, norm.b.grad});
    row_sum(OpKind::layernorm_bwd, name + ".bwd", {dy, x, w.w, s.mean, s.rstd}, std::move(out),
            layer)
        .held = s.held;
    return;
  }
  const int dx_f32 = s.x == x ? dx : grad_of(s.x);
  TensorIds out{dx_f32};
  if (w.trainable()) out.push_back(w.grad);
  Op& o = rms_attrs(
      row_sum(OpKind::rmsnorm_bwd, name + ".bwd", {dy, s.x, w.w, s.rstd}, std::move(out), layer));
  o.held = s.held;
  o.held.push_back(tensor(name + ".bwd.scratch", {2, B_, S_, H_}, DType::f32, Role::transient));
  if (dx_f32 != dx) op(OpKind::cast, name + ".x_f32.grad.cast", {dx_f32}, {dx}, layer);
}

// A sandwich norm's backward: the residual's gradient in the norm output's dtype, through the
// norm into the gradient of the branch output x (returned).
int HfBuilder::post_norm_bwd(const Norm& norm, const HfNormSaved& s, int x, int dresidual,
                             int layer) {
  const int dout =
      branch_grad(dresidual, s.out, -1, -1, norm.name + ".out.grad.cast", "", layer, DropoutSite{});
  const int dx = grad_of(x);
  norm_bwd(norm, s, dout, x, dx, layer);
  return dx;
}

// The gradient of a residual stream x that a norm read, from the stream's own gradient
// `dresidual` and the gradient of the norm's output (-1: none flows back through the norm):
// their sum, made by the op `add`.
int HfBuilder::residual_bwd(const Norm& norm, const HfNormSaved& s, int x, int dresidual,
                            int dnorm_out, const Name& add, int layer) {
  if (dnorm_out < 0) return dresidual;
  const int dnorm_in = grad_named(norm.name + ".in.grad", x);
  norm_bwd(norm, s, dnorm_out, x, dnorm_in, layer);
  const int dx = grad_of(x);
  op(OpKind::add, add, {dresidual, dnorm_in}, {dx}, layer);
  return dx;
}

}  // namespace vrambench::build_hf
