// The hf builder's parameters and linears (HfLinears, the base of hf_builder.h's HfBuilder): a
// parameter with its optimizer's state (torch's, or bitsandbytes' 8-bit and paged ones), autocast's
// casts, and a linear's forward and backward as PyTorch runs it: trainable (full training), frozen
// (fine-tuning's base), stored in 4 bits by bitsandbytes' Linear4bit (QLoRA), with PEFT's LoRA
// adapters on its modules. docs/memory-model.md ("Fine-tuning under hf") lists what each keeps.
#pragma once

#include <cstdint>
#include <optional>
#include <utility>
#include <vector>

#include "config/run_config.h"
#include "core/quant_layout.h"
#include "program/build_common.h"
#include "program/program.h"

namespace vrambench::build_hf {

using build_common::Adapter;
using build_common::block_prefix;
using build_common::BlockWeights;
using build_common::kRecomputeSuffix;
using build_common::Linear;
using build_common::ModelParams;
using build_common::Norm;
using build_common::Param;
using build_common::Pass;
using build_common::QuantModule;

// What one adapter's forward leaves for its backward. PEFT's lora.Linear hands the layer input,
// cast to the adapter's fp32 (`_cast_input_dtype`), to the dropout and then to lora_A, whose
// autocast casts it to 16 bits again.
struct AdapterSaved {
  int in = -1;         // the dropout's input: the linear's input, or its fp32 copy
  int dropped = -1;    // the dropout's output (`in` without LoRA dropout)
  int mask = -1;       // the dropout's mask (noise on the CPU), -1 without
  int x = -1;          // what lora_A's GEMM reads: `dropped`, or autocast's 16-bit copy
  int a = -1, b = -1;  // the weight operands: A and B, or autocast's cached 16-bit copies
  int xa = -1;         // x A^T, which lora_B saves
};

// What a linear's forward leaves for its backward.
struct LinearSaved {
  int x = -1;       // the GEMM's input (autocast's or Linear4bit's 16-bit copy)
  int x_orig = -1;  // the input before it was cast, -1 when not cast
  int w = -1;       // the weight operand (autocast: the 16-bit copy); -1 when quantised
  int b = -1;
  bool x_grad = true;  // the input requires grad: the backward computes its gradient
  std::vector<AdapterSaved> lora;
};

// The hf builder's base: makes the parameters and linears, casts, and writes a linear's forward
// and backward.
class HfLinears : protected build_common::StepShape, protected build_common::ProgramWriter {
 protected:
  HfLinears(const RunConfig& cfg, Bytes gemm_workspace, bool cpu)
      : StepShape(cfg), ProgramWriter(cfg, gemm_workspace), cfg_(cfg), cpu_(cpu) {
    finetune_ = is_finetune(cfg);
    quant_ = finetune_ ? base_quant(cfg) : QuantKind::none;
    amp_ = hf_autocast(cfg);
    // The model's own dtype: fp32 under autocast; the 16-bit type of a model loaded in 16 bits.
    wdt_ = amp_ || cfg.dtype == Precision::fp32 || cfg.dtype == Precision::tf32
               ? DType::f32
               : activation_dtype(cfg.dtype);
    cdt_ = activation_dtype(cfg.dtype);  // what the GEMMs produce
    gpt_ = cfg.model.arch == Arch::gpt;
    lora_scale_ = static_cast<float>(cfg.lora_alpha / static_cast<double>(cfg.lora_rank));
  }

  // ---- casts --------------------------------------------------------------------------------

  // `name` in `dtype` (a new tensor made by a cast op), or x itself when it has that dtype.
  int cast(int x, DType dtype, const Name& name, Role role, int layer, bool recompute) {
    if (dtype_of(x) == dtype) return x;
    const int y = tensor(recompute ? name + recompute_suffix_ : name, dims_of(x), dtype, role);
    op(OpKind::cast, name + ".cast", {x}, {y}, layer, recompute);
    return y;
  }

  // ---- parameters ---------------------------------------------------------------------------

  enum class Train { full, frozen, adapter };

  // A parameter: a full-training weight in the model's dtype, a frozen one (fine-tuning's base:
  // the weight alone, fp32 after prepare_model_for_kbit_training), or an adapter in fp32 (PEFT's
  // autocast_adapter_dtype), each trainable one with its gradient and optimizer state; `stored`
  // where the weight is kept in another dtype (a 4-bit linear's bias).
  Param weight(const Name& name, Shape shape, int layer, Train train = Train::full,
               std::optional<DType> stored = std::nullopt) {
    Param param;
    param.layer = layer;
    std::int64_t numel = 1;
    for (std::int64_t d : shape) numel *= d;
    param.numel = numel;
    const Dims dims = fixed(shape);
    const DType dtype = stored ? *stored : train == Train::adapter ? DType::f32 : wdt_;
    const MemoryComponent component = train == Train::full     ? MemoryComponent::weights
                                      : train == Train::frozen ? MemoryComponent::frozen_weights
                                                               : MemoryComponent::adapters;
    param.w = tensor(name, dims, dtype, Role::weight, component);
    if (train == Train::frozen) return param;
    optimizer_state(name, dims, dtype, param);
    param.grad =
        tensor(name + ".grad", dims, dtype, Role::grad,
               train == Train::full ? MemoryComponent::gradients : MemoryComponent::adapter_grads);
    params_.push_back(param);
    return param;
  }

  // What the optimizer keeps for a trainable parameter. torch.optim.AdamW: exp_avg and
  // exp_avg_sq in the parameter's dtype and a `step` scalar, which is a CPU tensor but where the
  // reference runs on the CPU; SGD: momentum_buffer; bitsandbytes' AdamW8bit, PagedAdamW8bit and
  // PagedAdamW32bit: bnb_adamw_state, and the quantisation maps of the 8-bit ones. bitsandbytes
  // counts steps in Python, not in a tensor. Every optimizer makes its state at its first step()
  // (Tensor::lazy): torch.optim for all parameters before it updates any (add_optimizer),
  // bitsandbytes each parameter's as it comes to it.
  void optimizer_state(const Name& name, const Dims& dims, DType dtype, Param& param) {
    const Optimizer o = cfg_.optimizer;
    const std::size_t before = p_.tensors.size();
    if (o == Optimizer::adamw) {
      param.m = tensor(name + ".exp_avg", dims, dtype, Role::optimizer_state);
      param.v = tensor(name + ".exp_avg_sq", dims, dtype, Role::optimizer_state);
      if (cpu_) tensor(name + ".step", {1}, DType::f32, Role::optimizer_state);
    } else if (o == Optimizer::sgd) {
      param.momentum = tensor(name + ".momentum_buffer", dims, dtype, Role::optimizer_state);
    } else if (is_adamw(o)) {
      bnb_adamw_state(name, dims, {".state1", ".state2", ".absmax1", ".absmax2"}, param);
      // The dynamic maps that quantise the two moments: one pair per optimizer.
      if (param.m_absmax >= 0 && qmaps_ < 0)
        qmaps_ =
            tensor("optimizer.qmap", {2, kDynamicMapEntries}, DType::f32, Role::optimizer_state);
    }
    for (std::size_t t = before; t < p_.tensors.size(); ++t) p_.tensors[t].lazy = !cpu_;
  }

  // A block linear of the weights description: trainable under full training; else frozen,
  // stored quantised under --quant (its bias then in the compute dtype, as Linear4bit casts it in
  // its first forward), with an adapter on each targeted module.
  // `adapters` false: a reference model's copy, frozen and without adapters.
  Linear linear(const Name& name, const WeightModule& module, int layer, bool adapters = true) {
    const Train train = finetune_ || !adapters ? Train::frozen : Train::full;
    return linear_of(
        name, module, quant_, adapters_in_layer_,
        [&](const Name& n, Shape shape, bool is_bias) {
          return weight(n, shape, layer, train,
                        is_bias && quant_ != QuantKind::none ? std::optional(cdt_) : std::nullopt);
        },
        [&](const Name& n, Shape shape) { return weight(n, shape, layer, Train::adapter); },
        adapters);
  }

  // Block l's parameters as the weights description lists them (`modules`).
  BlockWeights block_weights(const WeightModules& modules, int l) {
    const Train train = finetune_ ? Train::frozen : Train::full;
    adapters_in_layer_ = 0;
    return build_common::lay_out_block(
        modules, l, false,
        [&](const Name& name, Shape shape) { return weight(name, shape, l, train); },
        [&](const Name& name, const WeightModule& module) { return linear(name, module, l); });
  }

  // ---- linears ------------------------------------------------------------------------------

  // The dtype of a linear's output from input x: autocast's (or the model's) compute dtype;
  // Linear4bit's output is cast back to its input's dtype (`.to(inp_dtype)`), and PEFT's sum
  // with the adapters keeps it.
  DType out_dtype(const Linear& lin, int x) const { return lin.quantized() ? dtype_of(x) : cdt_; }

  // Autocast's 16-bit copy of weight `w`, or the weight itself without autocast. Autocast caches
  // the copies of leaves that require grad (a trainable weight or adapter: one copy per weight
  // and pass, kept through the forward), and makes a frozen weight's copy anew at every use.
  int autocast_weight(const Param& w, Role role, const Pass& pass) {
    if (!amp_) return w.w;
    const int c = cast(w.w, cdt_, p_.tensor(w.w).name + ".autocast", role, w.layer, pass.recompute);
    if (!pass.recompute && w.trainable()) autocast_cache_.push_back(c);
    return c;
  }

  // y = x w^T + b (y made by the caller, in out_dtype), then each adapter adds its share.
  // `x_grad`: whether x requires grad. Returns what the backward reads.
  LinearSaved linear_fwd(const Linear& lin, int x, int y, int layer, const Pass& pass,
                         bool x_grad) {
    LinearSaved s;
    s.x = x;
    s.x_grad = x_grad;
    const Name& name = lin.name;
    if (lin.quantized()) {
      // Linear4bit: x.to(compute dtype), the weight dequantised for one GEMM, the output cast
      // back to x's dtype; nothing batch-sized is saved (bitsandbytes' MatMul4Bit keeps the
      // packed weight alone).
      if (dtype_of(x) != cdt_) {
        s.x_orig = x;
        s.x = cast(x, cdt_, name + ".in.compute", Role::transient, layer, pass.recompute);
      }
      const int w = tensor(suffixed(pass, name + ".w.dq"), {lin.out, lin.in}, cdt_, Role::transient,
                           MemoryComponent::dequant_transient);
      dequantize(lin.quant, w, quant_, layer, pass.recompute, false);
      TensorIds in{s.x, w};
      if (lin.b.present()) in.push_back(s.b = lin.b.w);
      int out = y;
      if (dtype_of(y) != cdt_)
        out = tensor(suffixed(pass, name + ".out.compute"), dims_of(y), cdt_, Role::transient);
      gemm(OpKind::linear_fwd, name, std::move(in), {out}, layer, pass.recompute);
      if (out != y) op(OpKind::cast, name + ".out.cast", {out}, {y}, layer, pass.recompute);
    } else {
      // Autocast casts x to 16 bits; the GEMM saves it when the weight trains. A frozen weight's
      // 16-bit copy is saved when x requires grad (dx = dy w).
      const Role x_role = lin.trainable() ? saved(pass) : Role::transient;
      if (amp_ && dtype_of(x) != cdt_) {
        s.x_orig = x;
        s.x = cast(x, cdt_, name + ".in.autocast", x_role, layer, pass.recompute);
      }
      const Role w_role = lin.trainable() || x_grad ? saved(pass) : Role::transient;
      s.w = autocast_weight(lin.w, w_role, pass);
      TensorIds in{s.x, s.w};
      if (lin.b.present()) {
        s.b = autocast_weight(lin.b, lin.trainable() ? saved(pass) : Role::transient, pass);
        in.push_back(s.b);
      }
      gemm(OpKind::linear_fwd, name, std::move(in), {y}, layer, pass.recompute);
    }
    for (const Adapter& ad : lin.lora)
      s.lora.push_back(adapter_fwd(lin, ad, x, y, layer, pass, x_grad));
    return s;
  }

  // One adapter's forward: lora_B(lora_A(dropout(x))) * scaling added into its columns of y.
  AdapterSaved adapter_fwd(const Linear& lin, const Adapter& ad, int x, int y, int layer,
                           const Pass& pass, bool x_grad) {
    AdapterSaved a;
    const Role role = saved(pass);
    // PEFT casts the input to the adapter's fp32, except bitsandbytes' layers under CUDA
    // autocast (`torch.is_autocast_enabled()` asks about CUDA's alone).
    const bool convert = !lin.quantized() || !amp_ || cpu_;
    a.in = convert
               ? cast(x, DType::f32, ad.name + ".lora.in", Role::transient, layer, pass.recompute)
               : x;
    a.dropped = a.in;
    if (cfg_.lora_dropout > 0.0) {
      a.dropped = tensor(suffixed(pass, ad.name + ".lora_dropout.out"), dims_of(a.in),
                         dtype_of(a.in), Role::transient);
      // CUDA's dropout keeps a byte mask, the CPU's a noise tensor of the input's dtype; either
      // is saved when the input requires grad.
      a.mask = tensor(suffixed(pass, ad.name + ".lora_dropout.mask"), dims_of(a.in),
                      cpu_ ? dtype_of(a.in) : DType::u8, x_grad ? role : Role::transient);
      lora_dropout_attrs(op(OpKind::dropout_fwd, ad.name + ".lora_dropout", {a.in},
                            {a.dropped, a.mask}, layer, pass.recompute),
                         layer, ad);
    }
    // lora_A saves its input (A trains): autocast's 16-bit copy, or the fp32 one.
    a.x = amp_ ? cast(a.dropped, cdt_, ad.name + ".lora_A.in.autocast", role, layer, pass.recompute)
               : a.dropped;
    keep_for_backward(a.x, pass);
    // A's copy is saved for dx (when x requires grad), B's for d(xa) (always).
    a.a = autocast_weight(ad.a, x_grad ? role : Role::transient, pass);
    a.b = autocast_weight(ad.b, role, pass);
    const DType xa_dtype = amp_ ? cdt_ : DType::f32;
    a.xa = tensor(suffixed(pass, ad.name + ".lora_xa"), {B_, S_, cfg_.lora_rank}, xa_dtype, role);
    Op& o = gemm(OpKind::lora_fwd, ad.name + ".lora", {a.x, a.a, a.b, y}, {a.xa, y}, layer,
                 pass.recompute);
    o.col_offset = ad.col_offset;
    o.lora_scale = lora_scale_;
    // lora_B's output and its product with the scaling, then result + that (promoted) and its
    // cast back to the result's dtype: temporaries of the adapter's columns.
    const DType sum = promoted(dtype_of(y), xa_dtype);
    for (const char* t : {".lora_B.out", ".lora.scaled"})
      o.held.push_back(
          tensor(suffixed(pass, ad.name + t), {B_, S_, ad.out}, xa_dtype, Role::transient));
    o.held.push_back(
        tensor(suffixed(pass, ad.name + ".lora.sum"), {B_, S_, ad.out}, sum, Role::transient));
    if (sum != dtype_of(y))
      o.held.push_back(tensor(suffixed(pass, ad.name + ".lora.sum.cast"), {B_, S_, ad.out},
                              dtype_of(y), Role::transient));
    return a;
  }

  DType promoted(DType a, DType b) const {
    return a == DType::f32 || b == DType::f32 ? DType::f32 : a;
  }

  // Backward of a linear from dy: its weight's (and bias's) gradient when it trains, its
  // adapters' gradients, and dx (the gradient of its input before any cast) when the input
  // requires grad. Returns dx, or -1.
  int linear_bwd(const Linear& lin, const LinearSaved& s, int dy, int layer) {
    if (lin.trainable()) return trainable_bwd(lin, s, dy, layer);
    const Name& name = lin.name;
    int dx = -1;
    if (s.x_grad) {
      int dy_gemm = dy, w = s.w;
      if (lin.quantized()) {
        // MatMul4Bit's backward: the output's gradient in 16 bits, the weight dequantised again.
        if (dtype_of(dy) != cdt_) {
          dy_gemm = tensor(name + ".out.compute.grad", dims_of(dy), cdt_, Role::transient);
          op(OpKind::cast, name + ".out.cast.bwd", {dy}, {dy_gemm}, layer);
        }
        w = tensor(name + ".w.dq.bwd", {lin.out, lin.in}, cdt_, Role::transient,
                   MemoryComponent::dequant_transient);
        dequantize(lin.quant, w, quant_, layer, false, true);
      }
      const int dx_gemm = grad_of(s.x);
      gemm(OpKind::linear_dgrad, name + ".dgrad", {dy_gemm, w}, {dx_gemm}, layer);
      dx = dx_gemm;
      if (s.x_orig >= 0) {
        dx = grad_of(s.x_orig);
        op(OpKind::cast, name + ".in.grad.cast", {dx_gemm}, {dx}, layer);
      }
    }
    for (std::size_t k = 0; k < lin.lora.size(); ++k)
      dx = adapter_bwd(lin.lora[k], s.lora[k], s.x_orig >= 0 ? s.x_orig : s.x, dy, dx, layer,
                       s.x_grad);
    return dx;
  }

  // An adapter's backward from dy: A's and B's gradients, and, when the input x requires grad,
  // its share of dx added to `dx`. Returns dx.
  int adapter_bwd(const Adapter& ad, const AdapterSaved& a, int x, int dy, int dx, int layer,
                  bool x_grad) {
    const int da = amp_ ? grad_named(p_.tensor(ad.a.w).name + ".autocast.grad", a.a) : ad.a.grad;
    const int db = amp_ ? grad_named(p_.tensor(ad.b.w).name + ".autocast.grad", a.b) : ad.b.grad;
    TensorIds out{da, db, grad_named(ad.name + ".lora_xa.grad", a.xa)};
    int d = -1;
    if (x_grad) out.push_back(d = grad_named(ad.name + ".lora_A.in.grad", a.x));
    Op& o = gemm(OpKind::lora_bwd, ad.name + ".lora.bwd", {dy, a.x, a.xa, a.a, a.b}, std::move(out),
                 layer);
    o.col_offset = ad.col_offset;
    o.lora_scale = lora_scale_;
    // The gradient of the adapter's columns in its dtype, and of lora_B's output (the scaling).
    for (const char* t : {".lora.sum.grad", ".lora_B.out.grad"})
      o.held.push_back(tensor(ad.name + t, {B_, S_, ad.out}, dtype_of(a.xa), Role::transient));
    if (amp_) {
      op(OpKind::cast, p_.tensor(ad.a.w).name + ".grad.cast", {da}, {ad.a.grad}, layer);
      op(OpKind::cast, p_.tensor(ad.b.w).name + ".grad.cast", {db}, {ad.b.grad}, layer);
    }
    if (!x_grad) return dx;
    if (a.x != a.dropped) {
      const int next = grad_named(ad.name + ".lora_dropout.out.grad", a.dropped);
      op(OpKind::cast, ad.name + ".lora_A.in.grad.cast", {d}, {next}, layer);
      d = next;
    }
    if (a.mask >= 0) {
      const int next = grad_named(ad.name + ".lora.in.grad", a.in);
      lora_dropout_attrs(
          op(OpKind::dropout_bwd, ad.name + ".lora_dropout.bwd", {d, a.mask}, {next}, layer), layer,
          ad);
      d = next;
    }
    if (a.in != x) {
      const int next = grad_named(ad.name + ".lora.in.grad.cast", x);
      op(OpKind::cast, ad.name + ".lora.in.grad.cast", {d}, {next}, layer);
      d = next;
    }
    if (dx < 0) return d;
    const int sum = grad_named(ad.name + ".in.grad.sum", x);
    op(OpKind::add, ad.name + ".lora.grad_sum.bwd", {dx, d}, {sum}, layer);
    return sum;
  }

  // Full training: the GEMM's dx, dw (and db); autocast's weight gradients are the 16-bit
  // copies', cast to the fp32 .grad.
  int trainable_bwd(const Linear& lin, const LinearSaved& s, int dy, int layer) {
    const Param& w = lin.w;
    const Param& b = lin.b;
    const int dx = grad_of(s.x);
    TensorIds out{dx};
    const int dw = amp_ ? grad_named(p_.tensor(w.w).name + ".autocast.grad", s.w) : w.grad;
    out.push_back(dw);
    int db = -1;
    if (b.present()) {
      db = amp_ ? grad_named(p_.tensor(b.w).name + ".autocast.grad", s.b) : b.grad;
      out.push_back(db);
    }
    gemm(OpKind::linear_bwd, lin.name + ".bwd", {dy, s.x, s.w}, std::move(out), layer);
    if (amp_) {
      op(OpKind::cast, p_.tensor(w.w).name + ".grad.cast", {dw}, {w.grad}, layer);
      if (b.present()) op(OpKind::cast, p_.tensor(b.w).name + ".grad.cast", {db}, {b.grad}, layer);
    }
    if (s.x_orig < 0) return dx;
    const int dx_orig = grad_of(s.x_orig);
    op(OpKind::cast, lin.name + ".in.grad.cast", {dx}, {dx_orig}, layer);
    return dx_orig;
  }

  const RunConfig& cfg_;
  bool cpu_ = false;
  DType wdt_ = DType::f32, cdt_ = DType::f32;
  bool amp_ = false, gpt_ = true, finetune_ = false;
  QuantKind quant_ = QuantKind::none;  // of the frozen block linears
  float lora_scale_ = 0.0f;
  int adapters_in_layer_ = 0;
  int qmaps_ = -1;
  TensorIds autocast_cache_;
  std::vector<Param> params_;
};

}  // namespace vrambench::build_hf
