// The lean step's tensor events: what the caching allocator is replayed over for the lean
// framework (allocator_share.cpp). The step is the one src/program/build.cpp builds, followed
// over symbolic sizes (fixed bytes and bytes per sample) rather than one batch: its tensors in the
// order it creates them, and for each op the tensors it lists. A tensor lives from the first op
// that lists it to the last, as the program's liveness has it; parameters, their state and the
// inputs for the whole step; a gradient from its first write to the end of the step. The closed
// form's walks (estimate.cpp) give the tensors' bytes at every op; this gives their order, which
// decides what the allocator reserves beyond them. docs/memory-model.md, "The allocator".
#include <algorithm>
#include <cstdint>
#include <initializer_list>
#include <utility>
#include <vector>

#include "core/error.h"
#include "core/quant.h"
#include "estimate/walk.h"
#include "program/build_common.h"
#include "program/program.h"

namespace vrambench::estimate_walk {
namespace {

// How long a tensor lives: for the ops that list it, the whole step (parameters, their state,
// the inputs), from its first write to the end of the step (a gradient), or outside the device
// (a paged optimizer's moments, in managed memory).
enum class Life : std::uint8_t { ops, whole, grad, paged };

struct Size {
  Bytes fixed = 0, per_sample = 0;
};

struct Param {
  int w = -1, grad = -1;  // grad -1: frozen
  bool trainable() const { return grad >= 0; }
};

struct QuantModule {
  std::vector<int> parts;  // codes, absmax, nested absmax, offset: what dequantising reads
  bool nested = false;
  Bytes blocks = 0;
};

struct Linear {
  Param w, b;
  std::vector<QuantModule> quant;
  std::vector<std::pair<Param, Param>> lora;  // A, B per targeted module
  Bytes in = 0, out = 0;
};

struct LinearSaved {
  std::vector<int> x, mask, xa;
};

struct Weights {
  Param norm1_w, norm1_b, norm2_w, norm2_b;
  Linear qkv, proj, fc, up, out;
};

struct Core {
  int scores = -1, probs = -1, probs_drop = -1, probs_mask = -1, y = -1, lse = -1;
  int values_input() const { return probs_drop >= 0 ? probs_drop : probs; }
};

struct Mlp {
  int fc_out = -1, gelu_out = -1, gate_out = -1, up_out = -1, swiglu_out = -1, out = -1, drop = -1,
      mask = -1;
  LinearSaved fc_saved, up_saved, out_saved;
  int y() const { return drop >= 0 ? drop : out; }
};

struct Grad {
  bool x_in = true, qkv = true, x_mid = true, fc = true, up = true;
};

struct Block {
  int x_in = -1, norm1_out = -1, norm1_mean = -1, norm1_rstd = -1;
  int qkv_linear = -1, qkv = -1;
  Core core;
  int proj_out = -1, proj_mask = -1, x_mid = -1;
  int norm2_out = -1, norm2_mean = -1, norm2_rstd = -1;
  Mlp mlp;
  int x_out = -1;
  LinearSaved qkv_saved, proj_saved;
  Grad grad;
};

// The sizes are the builder's (StepShape); its batch is not read: every size is per sample.
class LeanStep : private build_common::StepShape {
 public:
  LeanStep(const RunConfig& cfg, Bytes gemm_workspace)
      : StepShape(cfg), cfg_(cfg), workspace_bytes_(gemm_workspace) {
    act_ = activation_dtype(cfg.dtype);
    gpt_ = cfg.model.arch == Arch::gpt;
    eager_ = cfg.attention == Attention::eager;
    dropout_ = cfg.dropout > 0.0;
    finetune_ = is_finetune(cfg);
    quant_ = finetune_ ? base_quant(cfg) : QuantKind::none;
    lora_dropout_ = finetune_ && cfg.lora_dropout > 0.0;
  }

  TensorEvents build() {
    switch (cfg_.scope) {
      case Scope::model:
        model();
        break;
      case Scope::layer:
        layer();
        break;
      case Scope::attention:
        attention();
        break;
      case Scope::mlp:
        mlp();
        break;
    }
    return events();
  }

 private:
  // ---- tensors and ops ----------------------------------------------------------------------

  int tensor(Size size, Life life = Life::ops) {
    sizes_.push_back(size);
    lives_.push_back(life);
    return static_cast<int>(sizes_.size()) - 1;
  }
  // Bytes of one sample of `elements` elements of `type`, or fixed bytes.
  Size per_sample(Bytes elements, DType type) const {
    return {0, checked_mul(elements, dtype_size(type), "tensor bytes")};
  }
  Size fixed(Bytes elements, DType type) const {
    return {checked_mul(elements, dtype_size(type), "tensor bytes"), 0};
  }
  Size rows(Bytes width, DType type) const {
    return per_sample(checked_mul(S_, width, "activation elements"), type);
  }
  Size hidden() const { return rows(H_, act_); }
  Size square() const { return rows(checked_mul(A_, S_, "heads x seq"), act_); }
  // A gradient of the same size as `id`, transient.
  int grad_of(int id) { return tensor(sizes_[static_cast<std::size_t>(id)]); }

  void op(std::initializer_list<int> ids) { op(std::vector<int>(ids)); }
  void op(const std::vector<int>& ids) {
    for (int id : ids)
      if (id >= 0) listed_.emplace_back(static_cast<int>(ops_), id);
    ++ops_;
  }
  // GEMMs and row sums list the step's one workspace, created by the first of them.
  void gemm(std::vector<int> ids) {
    if (workspace_bytes_ > 0) {
      if (workspace_ < 0) workspace_ = tensor({workspace_bytes_, 0});
      ids.push_back(workspace_);
    }
    op(ids);
  }

  // ---- parameters ---------------------------------------------------------------------------

  Param weight(Bytes numel, bool trainable) {
    Param p;
    p.w = tensor(fixed(numel, act_), Life::whole);
    if (!trainable) return p;
    const Optimizer opt = cfg_.optimizer;
    if (opt != Optimizer::none && has_master_weights(cfg_.dtype))
      tensor(fixed(numel, DType::f32), Life::whole);
    if (is_adamw(opt)) {
      const bool eight_bit = is_8bit(opt) && optimizer_state_is_8bit(numel);
      const Life where = is_paged(opt) && numel >= kPagedMinNumel ? Life::paged : Life::whole;
      const DType moment = eight_bit ? DType::u8 : DType::f32;
      tensor(fixed(numel, moment), where);
      tensor(fixed(numel, moment), where);
      if (eight_bit) {
        const Bytes blocks = quant_blocks(numel, kOptimizer8bitBlock);
        tensor(fixed(blocks, DType::f32), Life::whole);
        tensor(fixed(blocks, DType::f32), Life::whole);
      }
    } else if (opt == Optimizer::sgd) {
      tensor(fixed(numel, DType::f32), Life::whole);
    }
    p.grad = tensor(fixed(numel, act_), Life::grad);
    return p;
  }

  Linear linear(Bytes in, std::initializer_list<std::pair<LoraModule, Bytes>> modules, bool bias) {
    Linear lin;
    lin.in = in;
    for (const auto& [module, rows] : modules) lin.out += rows;
    if (quant_ == QuantKind::none) {
      lin.w = weight(checked_mul(lin.out, in, "linear"), !finetune_);
    } else {
      const bool nested = is_4bit(quant_) && cfg_.double_quant == Toggle::on;
      for (const auto& [module, rows] : modules) {
        QuantModule q;
        q.nested = nested;
        q.blocks = quant_blocks(checked_mul(rows, in, "module"), kQuant4bitBlock);
        for (const QuantizedTensor& t :
             quantized_weight_tensors(checked_mul(rows, in, "module"), rows, quant_, nested)) {
          // Codes and 8-bit absmax are bytes; every other part is fp32.
          const bool bytes = t.name == "weight" || (t.name == "absmax" && nested);
          const int id = tensor(bytes ? fixed(t.bytes, DType::u8) : fixed(t.bytes / 4, DType::f32),
                                Life::whole);
          if (t.name != "quant_map" && t.name != "nested_quant_map") q.parts.push_back(id);
        }
        lin.quant.push_back(std::move(q));
      }
    }
    if (bias) lin.b = weight(lin.out, !finetune_);
    if (finetune_)
      for (const auto& [module, rows] : modules)
        if (lora_targets_module(cfg_.lora_targets, cfg_.model.arch, module)) {
          const Param a = weight(checked_mul(cfg_.lora_rank, in, "lora A"), true);
          const Param b = weight(checked_mul(rows, cfg_.lora_rank, "lora B"), true);
          lin.lora.emplace_back(a, b);
        }
    return lin;
  }

  Weights block_weights() {
    Weights w;
    const bool train = !finetune_;
    w.norm1_w = weight(H_, train);
    if (gpt_) {
      w.norm1_b = weight(H_, train);
      w.qkv = linear(H_, {{LoraModule::c_attn, Q_}}, true);
      w.proj = linear(H_, {{LoraModule::attn_c_proj, H_}}, true);
      w.norm2_w = weight(H_, train);
      w.norm2_b = weight(H_, train);
    } else {
      w.qkv = linear(H_,
                     {{LoraModule::q, checked_mul(A_, D_, "q")},
                      {LoraModule::k, checked_mul(K_, D_, "k")},
                      {LoraModule::v, checked_mul(K_, D_, "v")}},
                     cfg_.model.qkv_bias);
      w.proj = linear(H_, {{LoraModule::o, H_}}, false);
      w.norm2_w = weight(H_, train);
    }
    mlp_weights(w);
    return w;
  }
  void mlp_weights(Weights& w) {
    if (gpt_) {
      w.fc = linear(H_, {{LoraModule::c_fc, F_}}, true);
      w.out = linear(F_, {{LoraModule::mlp_c_proj, H_}}, true);
    } else {
      w.fc = linear(H_, {{LoraModule::gate, F_}}, false);
      w.up = linear(H_, {{LoraModule::up, F_}}, false);
      w.out = linear(F_, {{LoraModule::down, H_}}, false);
    }
  }

  // ---- linears ------------------------------------------------------------------------------

  // The GEMM's weight operand: the weight, or the dequantised copy that one op per module writes.
  int weight_operand(const Linear& lin) {
    if (lin.quant.empty()) return lin.w.w;
    const int w = tensor(fixed(checked_mul(lin.out, lin.in, "dequantised weight"), act_));
    for (const QuantModule& q : lin.quant) {
      std::vector<int> ids = q.parts;
      ids.push_back(w);
      if (q.nested) ids.push_back(tensor(fixed(q.blocks, DType::f32)));  // the rebuilt absmax
      op(ids);
    }
    return w;
  }

  LinearSaved linear_fwd(const Linear& lin, int x, int y) {
    const int w = weight_operand(lin);
    gemm({x, w, lin.b.w, y});
    LinearSaved saved;
    for (const auto& [a, b] : lin.lora) {
      int x_in = x, mask = -1;
      if (lora_dropout_) {
        x_in = tensor(rows(lin.in, act_));
        mask = tensor(rows(lin.in, DType::u8));
        op({x, x_in, mask});
      }
      const int xa = tensor(rows(cfg_.lora_rank, act_));
      gemm({x_in, a.w, b.w, y, xa});
      saved.x.push_back(x_in);
      saved.mask.push_back(mask);
      saved.xa.push_back(xa);
    }
    return saved;
  }

  int linear_bwd(const Linear& lin, const LinearSaved& saved, int dy, int x, int dx) {
    if (lin.w.trainable()) {
      gemm({dy, x, lin.w.w, dx, lin.w.grad, lin.b.grad});
      return dx;
    }
    if (dx >= 0) {
      const int w = weight_operand(lin);
      gemm({dy, w, dx});
    }
    for (std::size_t k = 0; k < lin.lora.size(); ++k) {
      const auto& [a, b] = lin.lora[k];
      const int dxa = tensor(rows(cfg_.lora_rank, act_));
      const bool dropped = saved.mask[k] >= 0;
      int dx_in = -1;
      if (dx >= 0) dx_in = dropped ? grad_of(saved.x[k]) : dx;
      gemm({dy, saved.x[k], saved.xa[k], a.w, b.w, a.grad, b.grad, dxa, dx_in});
      if (dx >= 0 && dropped) {
        const int dx_lora = grad_of(x);
        op({dx_in, saved.mask[k], dx_lora});
        const int sum = grad_of(x);
        op({dx, dx_lora, sum});
        dx = sum;
      }
    }
    return dx;
  }

  // ---- forward ------------------------------------------------------------------------------

  void norm_fwd(int x, int& out, int& mean, int& rstd) {
    out = tensor(hidden());
    mean = gpt_ ? tensor(rows(1, DType::f32)) : -1;
    rstd = tensor(rows(1, DType::f32));
    op({x, out, mean, rstd});
  }

  void probs_fwd(int qkv, Core& core) {
    core.scores = tensor(square());
    gemm({qkv, core.scores});
    core.probs = tensor(square());
    op({core.scores, core.probs});
    if (dropout_) {
      core.probs_drop = tensor(square());
      core.probs_mask = tensor(rows(checked_mul(A_, S_, "heads x seq"), DType::u8));
      op({core.probs, core.probs_drop, core.probs_mask});
    }
  }

  Core attention_fwd(int qkv) {
    Core core;
    core.y = tensor(hidden());
    if (eager_) {
      probs_fwd(qkv, core);
      gemm({core.values_input(), qkv, core.y});
    } else {
      core.lse = tensor(rows(A_, DType::f32));
      const int scratch = tensor({flash_fwd_scratch_bytes(), 0});
      op({qkv, core.y, core.lse, scratch});
    }
    return core;
  }

  // The dropout after a residual branch's output projection: its output and mask.
  void branch_dropout(int out, int& drop, int& mask) {
    drop = tensor(hidden());
    mask = tensor(rows(H_, DType::u8));
    op({out, drop, mask});
  }

  Mlp mlp_fwd(int x, const Weights& w) {
    Mlp mlp;
    const Size ffn = rows(F_, act_);
    if (gpt_) {
      mlp.fc_out = tensor(ffn);
      mlp.fc_saved = linear_fwd(w.fc, x, mlp.fc_out);
      mlp.gelu_out = tensor(ffn);
      op({mlp.fc_out, mlp.gelu_out});
      mlp.out = tensor(hidden());
      mlp.out_saved = linear_fwd(w.out, mlp.gelu_out, mlp.out);
    } else {
      mlp.gate_out = tensor(ffn);
      mlp.fc_saved = linear_fwd(w.fc, x, mlp.gate_out);
      mlp.up_out = tensor(ffn);
      mlp.up_saved = linear_fwd(w.up, x, mlp.up_out);
      mlp.swiglu_out = tensor(ffn);
      op({mlp.gate_out, mlp.up_out, mlp.swiglu_out});
      mlp.out = tensor(hidden());
      mlp.out_saved = linear_fwd(w.out, mlp.swiglu_out, mlp.out);
    }
    if (dropout_) branch_dropout(mlp.out, mlp.drop, mlp.mask);
    return mlp;
  }

  Block block_fwd(bool first, int x_in, const Weights& w) {
    Block b;
    b.x_in = x_in;
    b.grad = block_grad(w, !finetune_ || !first);
    norm_fwd(x_in, b.norm1_out, b.norm1_mean, b.norm1_rstd);
    b.qkv_linear = tensor(rows(Q_, act_));
    b.qkv_saved = linear_fwd(w.qkv, b.norm1_out, b.qkv_linear);
    b.qkv = b.qkv_linear;
    if (!gpt_) {  // rope: only the rotated copy is kept
      b.qkv = tensor(rows(Q_, act_));
      op({b.qkv_linear, b.qkv});
    }
    b.core = attention_fwd(b.qkv);
    b.proj_out = tensor(hidden());
    b.proj_saved = linear_fwd(w.proj, b.core.y, b.proj_out);
    int residual = b.proj_out;
    if (dropout_) branch_dropout(b.proj_out, residual, b.proj_mask);
    b.x_mid = tensor(hidden());
    op({x_in, residual, b.x_mid});
    norm_fwd(b.x_mid, b.norm2_out, b.norm2_mean, b.norm2_rstd);
    b.mlp = mlp_fwd(b.norm2_out, w);
    b.x_out = tensor(hidden());
    op({b.x_mid, b.mlp.y(), b.x_out});
    return b;
  }

  Grad block_grad(const Weights& w, bool x_in) const {
    Grad g;
    if (!finetune_) return g;
    g.x_in = x_in;
    g.qkv = x_in || !w.qkv.lora.empty();
    g.x_mid = g.qkv || !w.proj.lora.empty();
    g.fc = g.x_mid || !w.fc.lora.empty();
    g.up = !gpt_ && (g.x_mid || !w.up.lora.empty());
    return g;
  }

  // ---- backward -----------------------------------------------------------------------------

  int attention_bwd(int qkv, Core core, int dy) {
    const int dqkv = grad_of(qkv);
    if (!eager_) {
      const Bytes none = flash_bwd_scratch_bytes(0, S_, A_, K_, D_, act_);
      const int scratch = tensor({none, flash_bwd_scratch_bytes(1, S_, A_, K_, D_, act_) - none});
      op({dy, qkv, core.y, core.lse, dqkv, scratch});
      return dqkv;
    }
    if (cfg_.recompute == Recompute::selective) probs_fwd(qkv, core);
    const int values_in = core.values_input();
    const int dvalues_in = grad_of(values_in);
    gemm({dy, values_in, qkv, dvalues_in, dqkv});
    int dprobs = dvalues_in;
    if (dropout_) {
      dprobs = grad_of(core.probs);
      op({dvalues_in, core.probs_mask, dprobs});
    }
    const int dscores = grad_of(core.scores);
    op({dprobs, core.probs, dscores});
    gemm({dscores, qkv, dqkv});
    return dqkv;
  }

  int mlp_bwd(int x, const Mlp& mlp, const Weights& w, int dy, const Grad& g) {
    int dout = dy;
    if (dropout_) {
      dout = grad_of(mlp.out);
      op({dy, mlp.mask, dout});
    }
    if (gpt_) {
      const int dgelu = g.fc ? grad_of(mlp.gelu_out) : -1;
      linear_bwd(w.out, mlp.out_saved, dout, mlp.gelu_out, dgelu);
      if (!g.fc) return -1;
      const int dfc = grad_of(mlp.fc_out);
      op({dgelu, mlp.fc_out, dfc});
      return linear_bwd(w.fc, mlp.fc_saved, dfc, x, g.x_mid ? grad_of(x) : -1);
    }
    const bool swiglu = g.fc || g.up;
    const int dswiglu = swiglu ? grad_of(mlp.swiglu_out) : -1;
    linear_bwd(w.out, mlp.out_saved, dout, mlp.swiglu_out, dswiglu);
    if (!swiglu) return -1;
    const int dgate = grad_of(mlp.gate_out);
    const int dup = grad_of(mlp.up_out);
    op({dswiglu, mlp.gate_out, mlp.up_out, dgate, dup});
    // x feeds two projections: their input gradients are summed.
    int dx_up = g.x_mid ? grad_of(x) : -1;
    if (g.up) dx_up = linear_bwd(w.up, mlp.up_saved, dup, x, dx_up);
    int dx_gate = g.x_mid ? grad_of(x) : -1;
    if (g.fc) dx_gate = linear_bwd(w.fc, mlp.fc_saved, dgate, x, dx_gate);
    if (!g.x_mid) return -1;
    const int dx = grad_of(x);
    op({dx_gate, dx_up, dx});
    return dx;
  }

  // A norm's backward writes its share of its input's gradient and its parameters' gradients;
  // its row sums use the workspace.
  void norm_bwd(int dy, int x, const Param& w, const Param& b, int mean, int rstd, int dx) {
    gemm({dy, x, mean, rstd, dx, w.grad, b.grad});
  }

  int block_bwd(const Block& b, const Weights& w, int dx_out) {
    const Grad& g = b.grad;
    const int dnorm2_out = mlp_bwd(b.norm2_out, b.mlp, w, dx_out, g);
    if (!g.x_mid) return -1;
    const int dnorm2_in = grad_of(b.x_mid);
    norm_bwd(dnorm2_out, b.x_mid, w.norm2_w, w.norm2_b, b.norm2_mean, b.norm2_rstd, dnorm2_in);
    const int dx_mid = grad_of(b.x_mid);
    op({dx_out, dnorm2_in, dx_mid});
    int dproj = dx_mid;
    if (dropout_) {
      dproj = grad_of(b.proj_out);
      op({dx_mid, b.proj_mask, dproj});
    }
    const int dy = g.qkv ? grad_of(b.core.y) : -1;
    linear_bwd(w.proj, b.proj_saved, dproj, b.core.y, dy);
    if (!g.qkv) return g.x_in ? dx_mid : -1;
    int dqkv = attention_bwd(b.qkv, b.core, dy);
    if (!gpt_) {
      const int dqkv_linear = grad_of(b.qkv_linear);
      op({dqkv, dqkv_linear});
      dqkv = dqkv_linear;
    }
    const int dnorm1_out =
        linear_bwd(w.qkv, b.qkv_saved, dqkv, b.norm1_out, g.x_in ? grad_of(b.norm1_out) : -1);
    if (!g.x_in) return -1;
    const int dnorm1_in = grad_of(b.x_in);
    norm_bwd(dnorm1_out, b.x_in, w.norm1_w, w.norm1_b, b.norm1_mean, b.norm1_rstd, dnorm1_in);
    const int dx_in = grad_of(b.x_in);
    op({dx_mid, dnorm1_in, dx_in});
    return dx_in;
  }

  // ---- scopes -------------------------------------------------------------------------------

  void model() {
    const ModelConfig& m = cfg_.model;
    const int tokens = tensor(rows(1, DType::i32), Life::whole);
    const int targets = tensor(rows(1, DType::i32), Life::whole);
    const bool train = !finetune_;
    const Param wte = weight(checked_mul(V_, H_, "vocab x hidden"), train);
    Param wpe;
    if (gpt_) wpe = weight(checked_mul(position_rows(m, S_), H_, "positions x hidden"), train);
    std::vector<Weights> weights;
    for (Bytes l = 0; l < m.layers; ++l) weights.push_back(block_weights());
    const Param final_w = weight(H_, train);
    const Param final_b = gpt_ ? weight(H_, train) : Param{};
    const Param lm = m.tied_embeddings ? wte : weight(checked_mul(V_, H_, "vocab x hidden"), train);

    const int x0 = tensor(hidden());
    int embed_out = x0, embed_mask = -1;
    if (dropout_) {
      embed_out = tensor(hidden());
      embed_mask = tensor(rows(H_, DType::u8));
    }
    op({tokens, embed_out});
    if (dropout_) op({embed_out, x0, embed_mask});

    std::vector<Block> blocks;
    int x = x0;
    for (Bytes l = 0; l < m.layers; ++l) {
      blocks.push_back(block_fwd(l == 0, x, weights[static_cast<std::size_t>(l)]));
      x = blocks.back().x_out;
    }
    int final_out = -1, final_mean = -1, final_rstd = -1;
    norm_fwd(x, final_out, final_mean, final_rstd);
    const int logits = tensor(rows(V_, act_));
    gemm({final_out, logits});
    const int loss = tensor(fixed(1, DType::f32));
    const int lse = tensor(rows(1, DType::f32));
    op({logits, targets, loss, lse});

    const int dlogits = grad_of(logits);
    op({logits, lse, dlogits});
    const int dfinal_out = grad_of(final_out);
    // A frozen lm head back-propagates through its weight alone: its input is not read again.
    gemm({dlogits, lm.trainable() ? final_out : -1, dfinal_out, lm.grad});
    int dx = grad_of(x);
    norm_bwd(dfinal_out, x, final_w, final_b, final_mean, final_rstd, dx);
    for (Bytes l = m.layers - 1; l >= 0; --l) {
      const Weights& w = weights[static_cast<std::size_t>(l)];
      Block b = blocks[static_cast<std::size_t>(l)];
      if (cfg_.recompute == Recompute::full) b = block_fwd(l == 0, b.x_in, w);
      dx = block_bwd(b, w, dx);
      if (dx < 0) break;
    }
    if (!wte.trainable()) return;
    int dembed = dx;
    if (dropout_) {
      dembed = grad_of(embed_out);
      op({dx, embed_mask, dembed});
    }
    gemm({dembed, wte.grad, wpe.grad});
  }

  void layer() {
    const int x_in = tensor(hidden(), Life::whole);
    const Weights w = block_weights();
    Block b = block_fwd(true, x_in, w);
    const int dout = tensor(hidden(), Life::whole);
    if (cfg_.recompute == Recompute::full) b = block_fwd(true, x_in, w);
    block_bwd(b, w, dout);
  }

  void attention() {
    const int qkv = tensor(rows(Q_, act_), Life::whole);
    Core core = attention_fwd(qkv);
    const int dout = tensor(hidden(), Life::whole);
    if (cfg_.recompute == Recompute::full) core = attention_fwd(qkv);
    attention_bwd(qkv, core, dout);
  }

  void mlp() {
    const int x = tensor(hidden(), Life::whole);
    Weights w;
    mlp_weights(w);
    Mlp m = mlp_fwd(x, w);
    const int dout = tensor(hidden(), Life::whole);
    if (cfg_.recompute == Recompute::full) m = mlp_fwd(x, w);
    mlp_bwd(x, m, w, dout, Grad{});
  }

  // ---- liveness -----------------------------------------------------------------------------

  // The whole-step tensors in the order they were created, then op by op the tensors it is the
  // first to list (in creation order) and those it is the last to list.
  TensorEvents events() const {
    const std::size_t n = sizes_.size();
    std::vector<int> first(n, -1), last(n, -1);
    for (const auto& [at, id] : listed_) {
      const auto t = static_cast<std::size_t>(id);
      if (first[t] < 0) first[t] = at;
      last[t] = std::max(last[t], at);
    }
    const bool accumulating = cfg_.grad_accum > 1;
    auto whole = [&](std::size_t t) {
      return lives_[t] == Life::whole || first[t] < 0 || (lives_[t] == Life::grad && accumulating);
    };
    TensorEvents out;
    out.reserve(2 * n);
    auto alloc = [&](std::size_t t) {
      out.push_back({static_cast<std::int32_t>(t), true, sizes_[t].fixed, sizes_[t].per_sample});
    };
    for (std::size_t t = 0; t < n; ++t)
      if (lives_[t] != Life::paged && whole(t)) alloc(t);
    // Counting sort by op, creation order kept within an op.
    std::vector<std::int32_t> starts(ops_ + 1, 0), ends(ops_ + 1, 0);
    for (std::size_t t = 0; t < n; ++t) {
      if (lives_[t] == Life::paged || whole(t)) continue;
      ++starts[static_cast<std::size_t>(first[t]) + 1];
      if (lives_[t] == Life::ops) ++ends[static_cast<std::size_t>(last[t]) + 1];
    }
    for (std::size_t i = 0; i < ops_; ++i) {
      starts[i + 1] += starts[i];
      ends[i + 1] += ends[i];
    }
    std::vector<std::int32_t> allocs(static_cast<std::size_t>(starts[ops_]));
    std::vector<std::int32_t> frees(static_cast<std::size_t>(ends[ops_]));
    {
      std::vector<std::int32_t> a(starts.begin(), starts.end() - 1),
          f(ends.begin(), ends.end() - 1);
      for (std::size_t t = 0; t < n; ++t) {
        if (lives_[t] == Life::paged || whole(t)) continue;
        allocs[static_cast<std::size_t>(a[static_cast<std::size_t>(first[t])]++)] =
            static_cast<std::int32_t>(t);
        if (lives_[t] == Life::ops)
          frees[static_cast<std::size_t>(f[static_cast<std::size_t>(last[t])]++)] =
              static_cast<std::int32_t>(t);
      }
    }
    for (std::size_t i = 0; i < ops_; ++i) {
      for (std::int32_t k = starts[i]; k < starts[i + 1]; ++k)
        alloc(static_cast<std::size_t>(allocs[static_cast<std::size_t>(k)]));
      for (std::int32_t k = ends[i]; k < ends[i + 1]; ++k)
        out.push_back({frees[static_cast<std::size_t>(k)], false, 0, 0});
    }
    return out;
  }

  const RunConfig& cfg_;
  Bytes workspace_bytes_;
  DType act_ = DType::f32;
  bool gpt_ = true, eager_ = true, dropout_ = false, finetune_ = false, lora_dropout_ = false;
  QuantKind quant_ = QuantKind::none;

  std::vector<Size> sizes_;
  std::vector<Life> lives_;
  std::vector<std::pair<int, int>> listed_;  // (op, tensor) in the order the ops list them
  std::size_t ops_ = 0;
  int workspace_ = -1;
};

}  // namespace

TensorEvents lean_events(const RunConfig& cfg, Bytes gemm_workspace) {
  return LeanStep(cfg, gemm_workspace).build();
}

}  // namespace vrambench::estimate_walk
