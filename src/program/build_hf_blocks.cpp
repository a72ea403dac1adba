// The hf builder's decoder blocks, one function per variant: GPT2Block (layer norms, GELU MLP),
// LlamaDecoderLayer and the pre-norm blocks built on it (RMSNorm, rotary attention, gated MLP;
// Phi-3's dropout on both branches' outputs) and Gemma 2 and 3's sandwich-norm block (each
// branch's output normed before its residual add), forward and backward.
#include "program/hf_builder.h"

namespace vrambench::build_hf {

HfBlockTensors HfBuilder::block_fwd(int l, int x_in, const BlockWeights& w, const Pass& pass,
                                    bool x_in_grad) {
  if (gpt_) return gpt2_block_fwd(l, x_in, w, pass, x_in_grad);
  if (cfg_.model.sandwich_norms) return sandwich_block_fwd(l, x_in, w, pass, x_in_grad);
  return llama_block_fwd(l, x_in, w, pass, x_in_grad);
}

// The gradient of the block's input from the gradient of its output; under fine-tuning only
// what requires grad gets a gradient, and where the input does not, the backward of the layer
// ends below its first adapter (-1).
int HfBuilder::block_bwd(const HfBlockTensors& b, const BlockWeights& w, int dx_out) {
  if (gpt_) return gpt2_block_bwd(b, w, dx_out);
  if (cfg_.model.sandwich_norms) return sandwich_block_bwd(b, w, dx_out);
  return llama_block_bwd(b, w, dx_out);
}

// Decoder layer l from x_in (`x_in_grad`: whether it requires grad): which of its tensors
// require grad.
HfBlockTensors HfBuilder::block_start(int l, int x_in, const BlockWeights& w,
                                      bool x_in_grad) const {
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
  if (w.moe())
    b.mlp_grad = b.x_mid_grad || w.router.trainable() || w.gate_up.trainable() ||
                 !w.gate_up.lora.empty() || w.down.trainable() || !w.down.lora.empty();
  return b;
}

// x_in + ln_1 -> attn -> (dropout) ; x_mid + ln_2 -> mlp -> (dropout).
HfBlockTensors HfBuilder::gpt2_block_fwd(int l, int x_in, const BlockWeights& w, const Pass& pass,
                                         bool x_in_grad) {
  const Name pre = block_prefix(l);
  HfBlockTensors b = block_start(l, x_in, w, x_in_grad);
  b.norm1 = layer_norm_fwd(w.norm1, x_in, pass, l, x_in_grad);
  gpt2_attention_fwd(pre, l, w, pass, b);
  const int attn_y = proj_dropout_fwd(l, w, pass, b);
  b.x_mid = mid_residual_fwd(b, attn_y, pass);
  b.norm2 = layer_norm_fwd(w.norm2, b.x_mid, pass, l, b.x_mid_grad);
  gelu_mlp_fwd(pre, l, w, pass, b);
  const int mlp_y = mlp_dropout_fwd(l, w, pass, b);
  b.x_out = out_residual_fwd(b, mlp_y, pass);
  return b;
}

// x_in + attn_norm -> rotary attn -> (dropout) ; x_mid + mlp_norm -> gated mlp -> (dropout).
HfBlockTensors HfBuilder::llama_block_fwd(int l, int x_in, const BlockWeights& w, const Pass& pass,
                                          bool x_in_grad) {
  const Name pre = block_prefix(l);
  HfBlockTensors b = block_start(l, x_in, w, x_in_grad);
  b.norm1 = rms_norm_fwd(w.norm1, x_in, pass, l, x_in_grad);
  rotary_attention_fwd(pre, l, w, pass, b);
  const int attn_y = proj_dropout_fwd(l, w, pass, b);
  b.x_mid = mid_residual_fwd(b, attn_y, pass);
  b.norm2 = rms_norm_fwd(w.norm2, b.x_mid, pass, l, b.x_mid_grad);
  if (w.moe())
    moe_mlp_fwd(pre, l, w, pass, b);
  else
    gated_mlp_fwd(pre, l, w, pass, b);
  const int mlp_y = mlp_dropout_fwd(l, w, pass, b);
  b.x_out = out_residual_fwd(b, mlp_y, pass);
  return b;
}

// x_in + attn_norm -> rotary attn -> post_attn_norm ; x_mid + mlp_norm -> gated mlp ->
// post_mlp_norm.
HfBlockTensors HfBuilder::sandwich_block_fwd(int l, int x_in, const BlockWeights& w,
                                             const Pass& pass, bool x_in_grad) {
  const Name pre = block_prefix(l);
  HfBlockTensors b = block_start(l, x_in, w, x_in_grad);
  b.norm1 = rms_norm_fwd(w.norm1, x_in, pass, l, x_in_grad);
  rotary_attention_fwd(pre, l, w, pass, b);
  b.post_attn = post_norm_fwd(w.post_attn_norm, b.proj_out, pass, l, b.proj_grad);
  b.x_mid = mid_residual_fwd(b, b.post_attn.out, pass);
  b.norm2 = rms_norm_fwd(w.norm2, b.x_mid, pass, l, b.x_mid_grad);
  gated_mlp_fwd(pre, l, w, pass, b);
  b.post_mlp = post_norm_fwd(w.post_mlp_norm, b.mlp_out, pass, l, b.mlp_grad);
  b.x_out = out_residual_fwd(b, b.post_mlp.out, pass);
  return b;
}

// The attention's residual add: the block's middle, in the promoted dtype of its input and the
// branch's.
int HfBuilder::mid_residual_fwd(const HfBlockTensors& b, int branch, const Pass& pass) {
  const Name pre = block_prefix(b.layer);
  const int x_mid =
      tensor(suffixed(pass, pre + "x_mid"), bsh(), promoted(dtype_of(b.x_in), cdt_), saved(pass));
  op(OpKind::add, pre + "attn.residual", {b.x_in, branch}, {x_mid}, b.layer, pass.recompute);
  return x_mid;
}

// The MLP's residual add: the block output, which is the next block's input, kept even when
// checkpointed.
int HfBuilder::out_residual_fwd(const HfBlockTensors& b, int branch, const Pass& pass) {
  const Name pre = block_prefix(b.layer);
  const int x_out = tensor(suffixed(pass, pre + "x_out"), bsh(), dtype_of(b.x_mid),
                           pass.recompute ? Role::transient : Role::activation);
  op(OpKind::add, pre + "mlp.residual", {b.x_mid, branch}, {x_out}, b.layer, pass.recompute);
  return x_out;
}

// Dropout on the attention's or the MLP's output where the model has it (gpt2's resid_pdrop,
// Phi-3's): what the residual add reads.
int HfBuilder::proj_dropout_fwd(int l, const BlockWeights& w, const Pass& pass, HfBlockTensors& b) {
  if (!resid_dropout_) return b.proj_out;
  return b.proj_drop = dropout_fwd(w.proj.name, b.proj_out, l, DropoutSite::attn_proj, pass,
                                   mask_dtype(b.proj_out), b.proj_mask);
}

int HfBuilder::mlp_dropout_fwd(int l, const BlockWeights& w, const Pass& pass, HfBlockTensors& b) {
  if (!resid_dropout_) return b.mlp_out;
  return b.mlp_drop = dropout_fwd(w.out.name, b.mlp_out, l, DropoutSite::mlp_proj, pass,
                                  mask_dtype(b.mlp_out), b.mlp_mask);
}

int HfBuilder::gpt2_block_bwd(const HfBlockTensors& b, const BlockWeights& w, int dx_out) {
  const int dnorm2_out = b.mlp_grad ? gelu_mlp_bwd(b, w, mlp_branch_grad(b, w, dx_out)) : -1;
  if (!b.x_mid_grad) return -1;
  const int dx_mid = residual_bwd(w.norm2, b.norm2, b.x_mid, dx_out, dnorm2_out,
                                  block_prefix(b.layer) + "mlp.residual.bwd", b.layer);
  const int dnorm1_out =
      b.proj_grad ? attention_branch_bwd(b, w, proj_branch_grad(b, w, dx_mid)) : -1;
  return block_input_grad(b, w, dx_mid, dnorm1_out);
}

int HfBuilder::llama_block_bwd(const HfBlockTensors& b, const BlockWeights& w, int dx_out) {
  int dnorm2_out = -1;
  if (b.mlp_grad) {
    const int dmlp = mlp_branch_grad(b, w, dx_out);
    dnorm2_out = w.moe() ? moe_mlp_bwd(b, w, dmlp) : gated_mlp_bwd(b, w, dmlp);
  }
  if (!b.x_mid_grad) return -1;
  const int dx_mid = residual_bwd(w.norm2, b.norm2, b.x_mid, dx_out, dnorm2_out,
                                  block_prefix(b.layer) + "mlp.residual.bwd", b.layer);
  const int dnorm1_out =
      b.proj_grad ? attention_branch_bwd(b, w, proj_branch_grad(b, w, dx_mid)) : -1;
  return block_input_grad(b, w, dx_mid, dnorm1_out);
}

int HfBuilder::sandwich_block_bwd(const HfBlockTensors& b, const BlockWeights& w, int dx_out) {
  const int l = b.layer;
  const int dnorm2_out =
      b.mlp_grad
          ? gated_mlp_bwd(b, w, post_norm_bwd(w.post_mlp_norm, b.post_mlp, b.mlp_out, dx_out, l))
          : -1;
  if (!b.x_mid_grad) return -1;
  const int dx_mid = residual_bwd(w.norm2, b.norm2, b.x_mid, dx_out, dnorm2_out,
                                  block_prefix(l) + "mlp.residual.bwd", l);
  const int dnorm1_out =
      b.proj_grad ? attention_branch_bwd(
                        b, w, post_norm_bwd(w.post_attn_norm, b.post_attn, b.proj_out, dx_mid, l))
                  : -1;
  return block_input_grad(b, w, dx_mid, dnorm1_out);
}

// The gradient of the block's input from the gradient of its middle and that of the first
// norm's output (-1 where none flows back through the norm).
int HfBuilder::block_input_grad(const HfBlockTensors& b, const BlockWeights& w, int dx_mid,
                                int dnorm1_out) {
  if (dnorm1_out < 0) return b.x_in_grad ? dx_mid : -1;
  return residual_bwd(w.norm1, b.norm1, b.x_in, dx_mid, dnorm1_out,
                      block_prefix(b.layer) + "attn.residual.bwd", b.layer);
}

// The residual's gradient entering the attention's and the MLP's output projections: through
// the branch's dropout, if any.
int HfBuilder::proj_branch_grad(const HfBlockTensors& b, const BlockWeights& w, int dx_mid) {
  const Name& proj = w.proj.name;
  return branch_grad(dx_mid, b.proj_out, b.proj_drop, b.proj_mask, proj + ".out.grad.cast", proj,
                     b.layer, DropoutSite::attn_proj);
}

int HfBuilder::mlp_branch_grad(const HfBlockTensors& b, const BlockWeights& w, int dx_out) {
  return branch_grad(dx_out, b.mlp_out, b.mlp_drop, b.mlp_mask,
                     block_prefix(b.layer) + "mlp.out.grad.cast", w.out.name, b.layer,
                     DropoutSite::mlp_proj);
}

// The residual's gradient entering a branch whose output projection is `site`: in the branch's
// dtype (16-bit under autocast: a cast op named `cast`), then through its dropout, if any.
int HfBuilder::branch_grad(int dx, int out, int drop, int mask, const Name& cast, const Name& site,
                           int layer, DropoutSite where) {
  int d = dx;
  if (dtype_of(out) != dtype_of(dx)) {
    d = grad_of(drop >= 0 ? drop : out);
    op(OpKind::cast, cast, {dx}, {d}, layer);
  }
  if (drop >= 0) d = dropout_bwd(site, d, mask, out, layer, where);
  return d;
}

}  // namespace vrambench::build_hf
