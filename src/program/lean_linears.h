// The lean builder's parameters and linears (LeanLinears, the base of build_lean.cpp's
// LeanBuilder): a parameter with its optimizer state, a block linear stored whole or quantised with
// its LoRA adapters, and a linear's forward and backward.
#pragma once

#include <cstdint>
#include <string_view>
#include <utility>
#include <vector>

#include "config/run_config.h"
#include "core/quant_layout.h"
#include "program/build_common.h"
#include "program/program.h"

namespace vrambench::build_lean {

using build_common::Adapter;
using build_common::block_prefix;
using build_common::BlockWeights;
using build_common::DropoutSite;
using build_common::kRecomputeSuffix;
using build_common::Linear;
using build_common::ModelParams;
using build_common::Norm;
using build_common::Param;
using build_common::Pass;
using build_common::QuantModule;

// What a linear's forward keeps for the backward of its adapters.
struct LoraSaved {
  TensorIds x, mask, xa;  // per adapter: its input (x, or x after LoRA dropout), mask, x A^T
};

// The lean builder's base: makes the parameters and block linears, writes a linear's forward and
// backward.
class LeanLinears : protected build_common::StepShape, protected build_common::ProgramWriter {
 protected:
  LeanLinears(const RunConfig& cfg, Bytes gemm_workspace)
      : StepShape(cfg), ProgramWriter(cfg, gemm_workspace), cfg_(cfg) {
    act_ = activation_dtype(cfg.dtype);
    gpt_ = cfg.model.arch == Arch::gpt;
    finetune_ = is_finetune(cfg);
    quant_ = finetune_ ? base_quant(cfg) : QuantKind::none;
    lora_scale_ = static_cast<float>(cfg.lora_alpha / static_cast<double>(cfg.lora_rank));
  }

  // ---- parameters ---------------------------------------------------------------------------

  // A parameter; under fine-tuning the base's are frozen (`trainable` false): the weight alone.
  Param weight(Name name, Shape shape, int layer, bool trainable = true) {
    Param param;
    param.layer = layer;
    const Dims dims = fixed(shape);
    // Under fine-tuning the trainable parameters are the adapters, the rest the frozen base.
    param.w = tensor(name, dims, act_, Role::weight,
                     !finetune_  ? MemoryComponent::weights
                     : trainable ? MemoryComponent::adapters
                                 : MemoryComponent::frozen_weights);
    if (!trainable) return param;
    // The master copy follows its weight: executors initialise persistent tensors in id order and
    // the master starts as the fp32 copy of the weight.
    const bool step = cfg_.optimizer != Optimizer::none;
    if (step && has_master_weights(cfg_.dtype))
      param.master = tensor(name + ".master", dims, DType::f32, Role::master_weight);
    std::int64_t numel = 1;
    for (std::int64_t d : shape) numel *= d;
    param.numel = numel;
    if (is_adamw(cfg_.optimizer)) {
      // bitsandbytes' state (torch's AdamW is its fp32 case here).
      bnb_adamw_state(name, dims, {".m", ".v", ".m.absmax", ".v.absmax"}, param);
    } else if (cfg_.optimizer == Optimizer::sgd) {
      param.momentum = tensor(name + ".momentum", dims, DType::f32, Role::optimizer_state);
    }
    param.grad = tensor(name + ".grad", dims, act_, Role::grad,
                        finetune_ ? MemoryComponent::adapter_grads : MemoryComponent::gradients);
    params_.push_back(param);
    return param;
  }

  // A block linear of the weights description: trainable under full training; else frozen,
  // stored quantised under --quant, with an adapter on each targeted module.
  Linear linear(const Name& name, const WeightModule& module, int layer) {
    return linear_of(
        name, module, quant_, adapters_in_layer_,
        [&](const Name& n, Shape shape, bool) { return weight(n, shape, layer, !finetune_); },
        [&](const Name& n, Shape shape) { return weight(n, shape, layer); });
  }

  // Block l's parameters as the weights description lists them (`modules`); `mlp_only`: the
  // MLP's linears alone (the mlp scope).
  BlockWeights block_weights(const WeightModules& modules, int l, bool mlp_only = false) {
    adapters_in_layer_ = 0;
    return build_common::lay_out_block(
        modules, l, mlp_only,
        [&](const Name& name, Shape shape) { return weight(name, shape, l, !finetune_); },
        [&](const Name& name, const WeightModule& module) { return linear(name, module, l); });
  }

  // ---- linears of the fine-tuning recipes ---------------------------------------------------

  // The weight operand of a linear's GEMM: the weight, or under --quant its dequantised copy in
  // the compute dtype, a transient made by one dequantize op per module (in the forward, and
  // again in the backward).
  int weight_operand(const Linear& lin, int layer, bool recompute, bool backward) {
    if (lin.quant.empty()) return lin.w.w;
    const Name name = lin.name + (backward ? ".w.dq.bwd" : ".w.dq");
    const int w = tensor(recompute ? name + recompute_suffix_ : name, {lin.out, lin.in}, act_,
                         Role::transient, MemoryComponent::dequant_transient);
    dequantize(lin.quant, w, quant_, layer, recompute, backward);
    return w;
  }

  // y = x w^T + b, then each adapter adds its share; returns what the adapters' backward reads.
  LoraSaved linear_fwd(const Linear& lin, int x, int y, int layer, const Pass& pass) {
    const int w = weight_operand(lin, layer, pass.recompute, false);
    TensorIds in{x, w};
    push_if(in, lin.b);
    gemm(OpKind::linear_fwd, lin.name, std::move(in), {y}, layer, pass.recompute);
    LoraSaved saved_by;
    const Role role = saved(pass);
    const Dims x_shape = dims_of(x);
    for (const Adapter& ad : lin.lora) {
      int x_in = x, mask = -1;
      if (cfg_.lora_dropout > 0.0) {
        x_in = tensor(suffixed(pass, ad.name + ".lora_dropout.out"), x_shape, act_, role);
        mask = tensor(suffixed(pass, ad.name + ".lora_dropout.mask"), x_shape, DType::u8, role);
        lora_dropout_attrs(op(OpKind::dropout_fwd, ad.name + ".lora_dropout", {x}, {x_in, mask},
                              layer, pass.recompute),
                           layer, ad);
      }
      const int xa =
          tensor(suffixed(pass, ad.name + ".lora_xa"), {B_, S_, cfg_.lora_rank}, act_, role);
      Op& o = gemm(OpKind::lora_fwd, ad.name + ".lora", {x_in, ad.a.w, ad.b.w, y}, {xa, y}, layer,
                   pass.recompute);
      o.col_offset = ad.col_offset;
      o.lora_scale = lora_scale_;
      saved_by.x.push_back(x_in);
      saved_by.mask.push_back(mask);
      saved_by.xa.push_back(xa);
    }
    return saved_by;
  }

  // The backward of a linear from dy: its weight's and bias's gradients when it trains, its
  // adapters' gradients, and dx (the gradient of its input x) into `dx` when dx >= 0. Returns
  // the tensor that holds dx in the end (LoRA dropout sums into a new one), or -1.
  int linear_bwd(const Linear& lin, const LoraSaved& saved_by, int dy, int x, int dx, int layer) {
    if (lin.trainable()) {
      TensorIds grads{dx, lin.w.grad};
      push_grad_if(grads, lin.b);
      gemm(OpKind::linear_bwd, lin.name + ".bwd", {dy, x, lin.w.w}, std::move(grads), layer);
      return dx;
    }
    if (dx >= 0) {
      const int w = weight_operand(lin, layer, false, true);
      gemm(OpKind::linear_dgrad, lin.name + ".dgrad", {dy, w}, {dx}, layer);
    }
    for (std::size_t k = 0; k < lin.lora.size(); ++k) {
      const Adapter& ad = lin.lora[k];
      const int dxa =
          tensor(ad.name + ".lora_xa.grad", {B_, S_, cfg_.lora_rank}, act_, Role::transient);
      TensorIds out{ad.a.grad, ad.b.grad, dxa};
      const bool dropped = saved_by.mask[k] >= 0;
      int dx_in = -1;
      if (dx >= 0) {
        dx_in = dropped ? grad_of(saved_by.x[k]) : dx;
        out.push_back(dx_in);
      }
      Op& o = gemm(OpKind::lora_bwd, ad.name + ".lora.bwd",
                   {dy, saved_by.x[k], saved_by.xa[k], ad.a.w, ad.b.w}, std::move(out), layer);
      o.col_offset = ad.col_offset;
      o.lora_scale = lora_scale_;
      o.accumulate = dx >= 0 && !dropped;  // added into the frozen base's dx
      if (dx >= 0 && dropped) {
        const int dx_lora = grad_named(ad.name + ".lora.in.grad", x);
        lora_dropout_attrs(op(OpKind::dropout_bwd, ad.name + ".lora_dropout.bwd",
                              {dx_in, saved_by.mask[k]}, {dx_lora}, layer),
                           layer, ad);
        const int sum = grad_named(ad.name + ".in.grad.sum", x);
        op(OpKind::add, ad.name + ".lora.grad_sum.bwd", {dx, dx_lora}, {sum}, layer);
        dx = sum;
      }
    }
    return dx;
  }

  // A parameter's weight (gradient) appended to an op's list when it has one.
  static void push_if(TensorIds& list, const Param& p) {
    if (p.present()) list.push_back(p.w);
  }
  static void push_grad_if(TensorIds& list, const Param& p) {
    if (p.trainable()) list.push_back(p.grad);
  }

  const RunConfig& cfg_;
  DType act_ = DType::f32;
  bool gpt_ = true, finetune_ = false;
  QuantKind quant_ = QuantKind::none;  // of the frozen block linears
  float lora_scale_ = 0.0f;
  int adapters_in_layer_ = 0;
  std::vector<Param> params_;
};

}  // namespace vrambench::build_lean
