// The hf builder's MLPs: GPT-2's (c_fc, the python tanh-GELU, c_proj) and the llama family's
// gated one (gate_proj and up_proj, or Phi-3's gate_up_proj; SiLU(gate) * up; down_proj),
// forward and backward.
#include <utility>

#include "program/hf_builder.h"

namespace vrambench::build_hf {

// GPT2MLP of the second norm's output into b.mlp_out.
void HfBuilder::gelu_mlp_fwd(const Name& pre, int l, const BlockWeights& w, const Pass& pass,
                             HfBlockTensors& b) {
  const Role role = saved(pass);
  const Role act_role = saved(keeping(pass, b.fc_grad));
  b.fc_out =
      tensor(suffixed(pass, pre + "mlp.fc.out"), bsf(), out_dtype(w.fc, b.norm2.out), act_role);
  b.fc_saved = linear_fwd(w.fc, b.norm2.out, b.fc_out, l, pass, b.x_mid_grad);
  // gelu_new, a python composite: 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))). Autograd
  // saves x (by pow), tanh's output, 0.5 x and 1 + tanh (by the last product). Autocast on
  // CUDA runs pow in fp32: x's fp32 copy is saved and the tanh branch is fp32.
  const bool f32_branch = amp_ && !cpu_;
  b.gelu_in = f32_branch
                  ? cast(b.fc_out, DType::f32, pre + "mlp.fc.out.f32", act_role, l, pass.recompute)
                  : b.fc_out;
  const DType branch = dtype_of(b.gelu_in);
  // The activation's output is saved by a proj that trains (or an adapter's copy of it).
  b.gelu_out = tensor(suffixed(pass, pre + "mlp.gelu.out"), bsf(), branch,
                      w.out.trainable() ? role : Role::transient);
  Op& gelu = op(OpKind::gelu_fwd, pre + "mlp.gelu", {b.gelu_in}, {b.gelu_out}, l, pass.recompute);
  for (const char* piece : {"tanh", "one_plus_tanh"})
    b.gelu_held.push_back(
        tensor(suffixed(pass, pre + "mlp.gelu." + piece), bsf(), branch, act_role));
  b.gelu_held.push_back(
      tensor(suffixed(pass, pre + "mlp.gelu.half_x"), bsf(), dtype_of(b.fc_out), act_role));
  gelu.held = b.gelu_held;
  // x^3 and the sums before tanh: two alive at a time.
  gelu.held.push_back(
      tensor(suffixed(pass, pre + "mlp.gelu.scratch"), {2, B_, S_, F_}, branch, Role::transient));
  b.mlp_out = tensor(suffixed(pass, pre + "mlp.proj.out"), bsh(), out_dtype(w.out, b.gelu_out),
                     Role::transient);
  b.out_saved = linear_fwd(w.out, b.gelu_out, b.mlp_out, l, pass, b.act_grad);
}

// LlamaMLP (and Phi-3's) of the second norm's output into b.mlp_out: act_fn(gate) * up. SiLU
// saves its input, the product saves each factor when the other requires grad; the product is
// saved by a down that trains (or an adapter's copy of it). Phi-3's gate and up are halves of
// gate_up_proj's output (chunk: views), which either save keeps whole.
void HfBuilder::gated_mlp_fwd(const Name& pre, int l, const BlockWeights& w, const Pass& pass,
                              HfBlockTensors& b) {
  const Role role = saved(pass);
  const Role gate_role = saved(keeping(pass, b.fc_grad));
  const Role silu_role = saved(keeping(pass, b.up_grad));
  b.fc_out = tensor(suffixed(pass, w.fc.name + ".out"), fused_ ? Dims{B_, S_, 2 * F_} : bsf(),
                    out_dtype(w.fc, b.norm2.out), gate_role);
  b.fc_saved = linear_fwd(w.fc, b.norm2.out, b.fc_out, l, pass, b.x_mid_grad);
  TensorIds in{b.fc_out};
  if (!fused_) {
    b.up_out =
        tensor(suffixed(pass, pre + "mlp.up.out"), bsf(), out_dtype(w.up, b.norm2.out), gate_role);
    b.up_saved = linear_fwd(w.up, b.norm2.out, b.up_out, l, pass, b.x_mid_grad);
    in.push_back(b.up_out);
  }
  const DType act = dtype_of(b.fc_out);
  b.swiglu_out = tensor(suffixed(pass, pre + "mlp.swiglu.out"), bsf(), act,
                        w.out.trainable() ? role : Role::transient);
  Op& swiglu = gate_attrs(
      op(OpKind::swiglu_fwd, pre + "mlp.swiglu", std::move(in), {b.swiglu_out}, l, pass.recompute));
  const int silu = tensor(suffixed(pass, pre + "mlp.silu.out"), bsf(), act, silu_role);
  swiglu.held.push_back(silu);
  if (b.up_grad) b.swiglu_held.push_back(silu);
  b.mlp_out = tensor(suffixed(pass, pre + "mlp.down.out"), bsh(), out_dtype(w.out, b.swiglu_out),
                     Role::transient);
  b.out_saved = linear_fwd(w.out, b.swiglu_out, b.mlp_out, l, pass, b.act_grad);
}

// The MLPs' backward from the gradient of their output into the gradient of the second norm's
// output (-1 where none flows that far).
int HfBuilder::gelu_mlp_bwd(const HfBlockTensors& b, const BlockWeights& w, int dmlp) {
  const int l = b.layer;
  const Name pre = block_prefix(l);
  const int dact = linear_bwd(w.out, b.out_saved, dmlp, l);
  if (dact < 0) return -1;
  const int dgelu_in = grad_of(b.gelu_in);
  Op& gelu = op(OpKind::gelu_bwd, pre + "mlp.gelu.bwd", {dact, b.gelu_in}, {dgelu_in}, l);
  gelu.held = b.gelu_held;
  gelu.held.push_back(
      tensor(pre + "mlp.gelu.bwd.scratch", {2, B_, S_, F_}, dtype_of(b.gelu_in), Role::transient));
  int dfc = dgelu_in;
  if (b.gelu_in != b.fc_out) {
    dfc = grad_of(b.fc_out);
    op(OpKind::cast, pre + "mlp.fc.out.f32.grad.cast", {dgelu_in}, {dfc}, l);
  }
  return linear_bwd(w.fc, b.fc_saved, dfc, l);
}

int HfBuilder::gated_mlp_bwd(const HfBlockTensors& b, const BlockWeights& w, int dmlp) {
  const int l = b.layer;
  const Name pre = block_prefix(l);
  const int dact = linear_bwd(w.out, b.out_saved, dmlp, l);
  if (dact < 0) return -1;
  if (fused_) {
    // The product's and SiLU's gradients of up and gate, which chunk's backward
    // concatenates into the gradient of gate_up_proj's output.
    const int dgate_up = grad_of(b.fc_out);
    Op& swiglu =
        gate_attrs(op(OpKind::swiglu_bwd, pre + "mlp.swiglu.bwd", {dact, b.fc_out}, {dgate_up}, l));
    swiglu.held = b.swiglu_held;
    swiglu.held.push_back(tensor(pre + "mlp.swiglu.bwd.halves", {2, B_, S_, F_}, dtype_of(b.fc_out),
                                 Role::transient));
    return linear_bwd(w.fc, b.fc_saved, dgate_up, l);
  }
  const int dgate = grad_of(b.fc_out), dup = grad_of(b.up_out);
  gate_attrs(
      op(OpKind::swiglu_bwd, pre + "mlp.swiglu.bwd", {dact, b.fc_out, b.up_out}, {dgate, dup}, l))
      .held = b.swiglu_held;
  const int dx_up = linear_bwd(w.up, b.up_saved, dup, l);
  const int dx_gate = linear_bwd(w.fc, b.fc_saved, dgate, l);
  if (dx_up < 0 || dx_gate < 0) return -1;
  const int dnorm2_out = grad_of(b.norm2.out);
  op(OpKind::add, pre + "mlp.grad_sum.bwd", {dx_gate, dx_up}, {dnorm2_out}, l);
  return dnorm2_out;
}

}  // namespace vrambench::build_hf
