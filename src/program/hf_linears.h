// The hf builder's parameters and linears (HfLinears, the base of build_hf.cpp's HfBuilder): a
// parameter with torch's optimizer state, autocast's casts, and a linear's forward and backward.
#pragma once

#include <cstdint>
#include <utility>
#include <vector>

#include "core/config.h"
#include "program/build_common.h"
#include "program/program.h"

namespace vrambench::build_hf {

using build_common::block_prefix;
using build_common::kRecomputeSuffix;
using build_common::Param;
using build_common::Pass;

// What a linear's forward leaves for its backward.
struct LinearSaved {
  int x = -1;       // the GEMM's input (autocast: its 16-bit copy)
  int x_orig = -1;  // the input before autocast cast it, -1 when not cast
  int w = -1;       // the weight operand (autocast: the cached 16-bit copy)
  int b = -1;
};

// A decoder layer's parameters: fc is gpt's mlp.fc and llama's mlp.gate, out is mlp.proj and
// mlp.down.
struct HfBlockWeights {
  Param norm1_w, norm1_b, qkv_w, qkv_b, proj_w, proj_b, norm2_w, norm2_b;
  Param fc_w, fc_b, up_w, out_w, out_b;
};

// The hf builder's base: makes the parameters, casts, writes a linear's forward and backward.
class HfLinears : protected build_common::StepShape, protected build_common::ProgramWriter {
 protected:
  HfLinears(const RunConfig& cfg, Bytes gemm_workspace)
      : StepShape(cfg), ProgramWriter(cfg, gemm_workspace), cfg_(cfg) {
    amp_ = is_autocast(cfg.dtype);
    // The model's own dtype: fp32 under autocast; the 16-bit type of a model loaded in 16 bits.
    wdt_ = amp_ || cfg.dtype == Precision::fp32 || cfg.dtype == Precision::tf32
               ? DType::f32
               : activation_dtype(cfg.dtype);
    cdt_ = activation_dtype(cfg.dtype);  // what the GEMMs produce
    gpt_ = cfg.model.arch == Arch::gpt;
  }

  // ---- casts --------------------------------------------------------------------------------

  // `name` in `dtype` (a new tensor made by a cast op), or x itself when it has that dtype.
  int cast(int x, DType dtype, const Name& name, Role role, int layer, bool replay) {
    if (dtype_of(x) == dtype) return x;
    const int y = tensor(replay ? name + kRecomputeSuffix : name, dims_of(x), dtype, role);
    op(OpKind::cast, name + ".cast", {x}, {y}, layer, replay);
    return y;
  }

  // ---- parameters ---------------------------------------------------------------------------

  Param weight(const Name& name, Shape shape, int layer) {
    Param param;
    param.layer = layer;
    std::int64_t numel = 1;
    for (std::int64_t d : shape) numel *= d;
    param.numel = numel;
    const Dims dims = fixed(shape);
    param.w = tensor(name, dims, wdt_, Role::weight);
    if (cfg_.optimizer == Optimizer::adamw) {
      param.m = tensor(name + ".exp_avg", dims, wdt_, Role::optimizer_state);
      param.v = tensor(name + ".exp_avg_sq", dims, wdt_, Role::optimizer_state);
      // AdamW's `step` counter: one fp32 scalar per parameter tensor.
      tensor(name + ".step", {1}, DType::f32, Role::optimizer_state);
    } else if (cfg_.optimizer == Optimizer::sgd) {
      param.momentum = tensor(name + ".momentum_buffer", dims, wdt_, Role::optimizer_state);
    }
    param.grad = tensor(name + ".grad", dims, wdt_, Role::grad);
    params_.push_back(param);
    return param;
  }

  HfBlockWeights block_weights(int l) {
    const Name pre = block_prefix(l);
    HfBlockWeights w;
    if (gpt_) {
      w.norm1_w = weight(pre + "ln1.w", {H_}, l);
      w.norm1_b = weight(pre + "ln1.b", {H_}, l);
      w.qkv_w = weight(pre + "attn.qkv.w", {Q_, H_}, l);
      w.qkv_b = weight(pre + "attn.qkv.b", {Q_}, l);
      w.proj_w = weight(pre + "attn.proj.w", {H_, H_}, l);
      w.proj_b = weight(pre + "attn.proj.b", {H_}, l);
      w.norm2_w = weight(pre + "ln2.w", {H_}, l);
      w.norm2_b = weight(pre + "ln2.b", {H_}, l);
      w.fc_w = weight(pre + "mlp.fc.w", {F_, H_}, l);
      w.fc_b = weight(pre + "mlp.fc.b", {F_}, l);
      w.out_w = weight(pre + "mlp.proj.w", {H_, F_}, l);
      w.out_b = weight(pre + "mlp.proj.b", {H_}, l);
    } else {
      w.norm1_w = weight(pre + "attn_norm.w", {H_}, l);
      w.qkv_w = weight(pre + "attn.qkv.w", {Q_, H_}, l);
      if (cfg_.model.qkv_bias) w.qkv_b = weight(pre + "attn.qkv.b", {Q_}, l);
      w.proj_w = weight(pre + "attn.o.w", {H_, H_}, l);
      w.norm2_w = weight(pre + "mlp_norm.w", {H_}, l);
      w.fc_w = weight(pre + "mlp.gate.w", {F_, H_}, l);
      w.up_w = weight(pre + "mlp.up.w", {F_, H_}, l);
      w.out_w = weight(pre + "mlp.down.w", {H_, F_}, l);
    }
    return w;
  }

  // ---- linears ------------------------------------------------------------------------------

  // The operand a GEMM reads for weight `w` in this pass: the weight, or under autocast its
  // 16-bit copy, which autocast caches through the forward (one copy per weight and pass) and the
  // GEMM saves for its backward.
  int weight_operand(const Param& w, const Pass& pass) {
    if (!amp_) return w.w;
    const int c =
        cast(w.w, cdt_, p_.tensor(w.w).name + ".autocast", saved(pass), w.layer, pass.replay);
    if (!pass.replay) autocast_cache_.push_back(c);
    return c;
  }

  // y = x w^T + b; autocast casts x and the weights to 16 bits first.
  LinearSaved linear_fwd(const Name& name, const Param& w, const Param& b, int x, int y, int layer,
                         const Pass& pass) {
    LinearSaved s;
    s.x = x;
    if (amp_ && dtype_of(x) != cdt_) {
      s.x_orig = x;
      s.x = cast(x, cdt_, name + ".in.autocast", saved(pass), layer, pass.replay);
    }
    s.w = weight_operand(w, pass);
    TensorIds in{s.x, s.w};
    if (b.present()) {
      s.b = weight_operand(b, pass);
      in.push_back(s.b);
    }
    gemm(OpKind::linear_fwd, name, std::move(in), {y}, layer, pass.replay);
    return s;
  }

  // Backward of a linear from dy: its weight's (and bias's) gradient, and dx (the gradient of
  // the linear's input before autocast's cast). Returns dx.
  int linear_bwd(const Name& name, const Param& w, const Param& b, const LinearSaved& s, int dy,
                 int layer) {
    const int dx = grad_of(s.x);
    TensorIds out{dx};
    // Autocast: the GEMM's weight gradient is the 16-bit copy's, cast to the fp32 .grad.
    const int dw = amp_ ? grad_named(p_.tensor(w.w).name + ".autocast.grad", s.w) : w.grad;
    out.push_back(dw);
    int db = -1;
    if (b.present()) {
      db = amp_ ? grad_named(p_.tensor(b.w).name + ".autocast.grad", s.b) : b.grad;
      out.push_back(db);
    }
    gemm(OpKind::linear_bwd, name + ".bwd", {dy, s.x, s.w}, std::move(out), layer);
    if (amp_) {
      op(OpKind::cast, p_.tensor(w.w).name + ".grad.cast", {dw}, {w.grad}, layer);
      if (b.present()) op(OpKind::cast, p_.tensor(b.w).name + ".grad.cast", {db}, {b.grad}, layer);
    }
    if (s.x_orig < 0) return dx;
    const int dx_orig = grad_of(s.x_orig);
    op(OpKind::cast, name + ".in.grad.cast", {dx}, {dx_orig}, layer);
    return dx_orig;
  }

  const RunConfig& cfg_;
  DType wdt_ = DType::f32, cdt_ = DType::f32;
  bool amp_ = false, gpt_ = true;
  TensorIds autocast_cache_;
  std::vector<Param> params_;
};

}  // namespace vrambench::build_hf
