// The closed-form memory model. It follows the backward of one training step symbolically, tensor
// group by tensor group, keeping bytes for one sample (B = 1) apart from batch-independent bytes,
// and reports the points whose live bytes can be the peak. docs/memory-model.md derives every term.
#include "estimate/estimate.h"

#include <algorithm>
#include <limits>
#include <string_view>
#include <utility>

#include "core/error.h"
#include "core/quant.h"
#include "estimate/walk.h"
#include "program/program.h"

namespace vrambench {
namespace {

using namespace estimate_walk;  // NOLINT: the walk's shared vocabulary


// The model's sizes as Bytes (signed 64-bit) so that every product is checked.
struct Dims {
  Bytes S, H, A, K, D, L, V, F;
  Bytes Q;                 // packed q|k|v width: (A + 2K) * D
  Bytes e;                 // element size of activations, weights and gradients
  DType act = DType::f32;  // their storage type
  Bytes norm_stats;        // f32 statistics per row: LayerNorm mean + rstd (8), RMSNorm rstd (4)
  Bytes norm_params;  // parameters of one norm: LayerNorm weight + bias (2H), RMSNorm weight (H)
  Bytes positions;    // rows of the learned position table (gpt), 0 for llama
  bool gpt = true;
  bool eager = true;
  bool dropout = false;
  bool biases = true;
  Recompute recompute = Recompute::none;
};

Dims dims_of(const RunConfig& cfg) {
  const ModelConfig& m = cfg.model;
  Dims d{};
  d.S = cfg.seq;
  d.H = m.hidden;
  d.A = m.heads;
  d.K = m.kv_heads;
  d.D = m.head_dim();
  d.L = m.layers;
  d.V = m.vocab;
  d.F = m.ffn;
  d.Q = qkv_width(m);
  d.act = activation_dtype(cfg.dtype);
  d.e = dtype_size(d.act);
  d.gpt = m.arch == Arch::gpt;
  d.norm_stats = d.gpt ? 8 : 4;
  d.norm_params = d.gpt ? 2 * d.H : d.H;
  d.positions = position_rows(m, cfg.seq);
  d.eager = cfg.attention == Attention::eager;
  d.dropout = cfg.dropout > 0.0;
  d.biases = d.gpt;
  d.recompute = cfg.recompute;
  return d;
}

// Bytes of one sample of a [S, width] tensor with `elem`-byte elements.
Bytes rows(const Dims& d, Bytes width, Bytes elem) {
  return checked_mul(checked_mul(d.S, width, "activation elements"), elem, "activation bytes");
}
// Bytes of one sample of an attention matrix [A, S, S].
Bytes square(const Dims& d, Bytes elem) {
  return rows(d, checked_mul(d.A, d.S, "heads x seq"), elem);
}

// Parameter counts of the pieces the backward writes gradients for, in the order it writes them.
struct Params {
  Bytes block;    // one transformer block
  Bytes mlp;      // its MLP alone (scope mlp)
  Bytes lm_head;  // written by the lm head backward (the tied token embedding for gpt2)
  Bytes final_norm;
  Bytes embeddings;  // written by the embedding backward: untied token embedding, positions
  Bytes total;
};

Params params_of(const RunConfig& cfg, const Dims& d) {
  const ModelConfig& m = cfg.model;
  Params p{};
  p.block = layer_parameter_count(m);
  p.mlp = d.gpt ? checked_add(2 * checked_mul(d.F, d.H, "ffn x hidden"), d.F + d.H, "mlp params")
                : checked_mul(3 * d.F, d.H, "ffn x hidden");
  const Bytes vocab_rows = checked_mul(d.V, d.H, "vocab x hidden");
  p.lm_head = vocab_rows;
  p.final_norm = d.norm_params;
  p.embeddings = checked_add(m.tied_embeddings ? 0 : vocab_rows,
                             checked_mul(d.positions, d.H, "positions x hidden"), "embeddings");
  p.total = checked_add(checked_add(checked_mul(d.L, p.block, "block params"), p.lm_head, "params"),
                        checked_add(p.final_norm, p.embeddings, "params"), "parameter count");
  return p;
}

// Per-sample tensors live at one point, each filed under the component it is reported in.
// Pinned names are inputs of the step: a drop leaves them in place.
class Ledger {
 public:
  struct Entry {
    std::string_view name;
    MemoryComponent component;
    Bytes bytes;
  };

  void add(std::string_view name, MemoryComponent component, Bytes bytes) {
    live_.push_back({name, component, bytes});
  }
  void pin(std::string_view name) { pinned_.push_back(name); }
  bool has(std::string_view name) const {
    return std::any_of(live_.begin(), live_.end(), [&](const Entry& x) { return x.name == name; });
  }
  void drop(std::string_view name) {
    if (std::find(pinned_.begin(), pinned_.end(), name) != pinned_.end()) return;
    auto it =
        std::find_if(live_.begin(), live_.end(), [&](const Entry& x) { return x.name == name; });
    if (it == live_.end())
      throw InternalError("estimate: dropping '" + std::string(name) + "' twice");
    live_.erase(it);
  }
  // Drops `name` when it is live; for tensors that exist only in some configurations.
  void drop_if(std::string_view name) {
    if (has(name)) drop(name);
  }
  const std::vector<Entry>& entries() const { return live_; }

 private:
  std::vector<Entry> live_;
  std::vector<std::string_view> pinned_;
};

Bytes sum(const std::vector<Component>& list) {
  Bytes total = 0;
  for (const Component& c : list)
    if (c.kind != kPaged) total = checked_add(total, c.bytes, "breakdown total");
  return total;
}

std::vector<Component> components(const Shares& list) {
  std::vector<Component> out;
  out.reserve(list.size());
  for (const Share& c : list) out.push_back({c.component, c.bytes});
  return out;
}

// Batch-independent bytes: parameters and their state, device overhead, gradients written so far.
struct FixedState {
  Bytes weights = 0, master = 0, optimizer = 0, context = 0, workspace = 0;
  // Fine-tuning: the frozen base (compute dtype, and quantised), the adapters, paged state.
  Bytes frozen = 0, quantized = 0, adapters = 0, paged = 0;
  bool finetune = false;  // gradients are the adapters'
  // grad_accum > 1: every gradient is there from the start of the step (all of them, these bytes).
  Bytes persistent_grads = -1;
};

// The attention core's saved tensors for one sample: with eager attention the S x S probabilities
// (and, with dropout, their dropped copy and the mask), with flash only the fp32 log-sum-exp.
void add_core_saved(Ledger& led, const Dims& d, MemoryComponent component) {
  if (d.eager) {
    led.add("attn.probs", component, square(d, d.e));
    if (d.dropout) {
      led.add("attn.probs_drop", component, square(d, d.e));
      led.add("attn.mask", component, square(d, 1));
    }
  } else {
    led.add("attn.lse", component, rows(d, d.A, 4));
  }
}

// Saved tensors of one block in forward order, as recompute none keeps them.
void add_block_saved(Ledger& led, const Dims& d, MemoryComponent component,
                     MemoryComponent stats_component) {
  led.add("x_in", component, rows(d, d.H, d.e));
  led.add("norm1.out", component, rows(d, d.H, d.e));
  led.add("norm1.stats", stats_component, rows(d, 1, d.norm_stats));
  led.add("attn.qkv", component, rows(d, d.Q, d.e));  // llama: after rope
  add_core_saved(led, d, component);
  led.add("attn.y", component, rows(d, d.H, d.e));
  if (d.dropout) led.add("attn.proj.mask", component, rows(d, d.H, 1));
  led.add("x_mid", component, rows(d, d.H, d.e));
  led.add("norm2.out", component, rows(d, d.H, d.e));
  led.add("norm2.stats", stats_component, rows(d, 1, d.norm_stats));
  if (d.gpt) {
    led.add("mlp.fc.out", component, rows(d, d.F, d.e));
    led.add("mlp.gelu.out", component, rows(d, d.F, d.e));
  } else {
    led.add("mlp.gate", component, rows(d, d.F, d.e));
    led.add("mlp.up", component, rows(d, d.F, d.e));
    led.add("mlp.swiglu", component, rows(d, d.F, d.e));
  }
  if (d.dropout) led.add("mlp.mask", component, rows(d, d.H, 1));
}

// Which part of a block a walk covers.
struct Part {
  bool mlp = true;        // the MLP's linears and activation
  bool mlp_rest = true;   // norm2 and the residual add around the MLP
  bool attn_core = true;  // scores/softmax/values, or flash
  bool attn_rest = true;  // norm1, qkv and output projections, rope, the residual add
};

bool is_square(std::string_view name) {
  return name == "attn.probs" || name == "attn.probs_drop" || name == "attn.mask";
}

// Whether a saved tensor belongs to the covered part of the block.
bool in_part(std::string_view name, const Part& part, const Dims& d) {
  if (name.starts_with("mlp.")) return part.mlp;
  if (name == "x_mid" || name.starts_with("norm2.")) return part.mlp_rest;
  // FlashAttention's backward reads its output again; eager attention only the projection does.
  if (name == "attn.y") return d.eager ? part.attn_rest : (part.attn_core || part.attn_rest);
  if (is_square(name) || name == "attn.lse") return part.attn_core;
  return part.attn_rest;  // x_in, norm1.*, attn.qkv, attn.proj.mask
}

// Adds the saved tensors of the covered part as the recompute mode keeps them: full keeps only the
// block input, selective drops the S x S tensors. Tensors already live (a scope's inputs) stay.
void add_part_start(Ledger& led, const Dims& d, const Part& part) {
  Ledger all;
  add_block_saved(all, d, kSaved, kStats);
  for (const Ledger::Entry& x : all.entries()) {
    if (!in_part(x.name, part, d) || led.has(x.name)) continue;
    if (d.recompute == Recompute::full && x.name != "x_in") continue;
    if (d.recompute == Recompute::selective && is_square(x.name)) continue;
    led.add(x.name, x.component, x.bytes);
  }
}

// A point inside a block's backward: what is live of that block (per sample, by component) and the
// gradient bytes of the block written so far.
struct BlockPoint {
  std::string_view op;
  Shares live;
  Bytes grads = 0;
  Bytes scratch = 0;  // fixed bytes of the op's own scratch (workspace) at this point
  Bytes dequant = 0;  // fixed bytes of a dequantised weight (fine-tuning over a quantised base)
};

// The gradient entering a residual branch's output projection from `dy`: through the branch's
// dropout mask when the model has dropout (a new gradient; the mask goes), else dy itself. `mlp`
// picks the branch (the MLP's, or the attention projection's). Both walks take it alike.
template <typename At>
std::string_view branch_dropout_backward(Ledger& led, const Dims& d, std::string_view dy, bool mlp,
                                         At&& at) {
  if (!d.dropout) return dy;
  const std::string_view grad = mlp ? "d.mlp.drop" : "d.attn.drop";
  led.add(grad, kTransient, rows(d, d.H, d.e));
  at(mlp ? "mlp dropout backward" : "attention dropout backward");
  led.drop(mlp ? "mlp.mask" : "attn.proj.mask");
  return grad;
}

// The attention core's backward from d.attn.y to d.attn.qkv (eager: selective recompute's
// replay, values, dropout, softmax and scores; flash: the fused op and its scratch), recording a
// point with `at` at every op. Full training and fine-tuning walk it alike.
template <typename At>
void attention_core_backward(Ledger& led, const Dims& d, Bytes& scratch_fixed, At&& at) {
  if (d.eager) {
    // Selective recompute replays scores, softmax and dropout just before they are needed.
    if (d.recompute == Recompute::selective) {
      led.add("attn.scores", kRecomputed, square(d, d.e));
      led.add("attn.probs", kRecomputed, square(d, d.e));
      at("softmax replay");
      led.drop("attn.scores");
      if (d.dropout) {
        led.add("attn.probs_drop", kRecomputed, square(d, d.e));
        led.add("attn.mask", kRecomputed, square(d, 1));
        at("attention dropout replay");
      }
    }
    led.add("d.attn.probs_drop", kTransient, square(d, d.e));
    led.add("d.attn.qkv", kTransient, rows(d, d.Q, d.e));
    at("attention values backward");
    led.drop("d.attn.y");
    std::string_view d_probs = "d.attn.probs_drop";
    if (d.dropout) {
      led.drop("attn.probs_drop");
      led.add("d.attn.probs", kTransient, square(d, d.e));
      at("attention dropout backward (probs)");
      led.drop("d.attn.probs_drop");
      led.drop("attn.mask");
      d_probs = "d.attn.probs";
    }
    led.add("d.attn.scores", kTransient, square(d, d.e));
    at("softmax backward");
    led.drop(d_probs);
    led.drop("attn.probs");
    at("attention scores backward");
    led.drop("d.attn.scores");
    led.drop("attn.qkv");
  } else {
    led.add("d.attn.qkv", kTransient, rows(d, d.Q, d.e));
    // FlashAttention's backward keeps scratch for the op's duration, what cuDNN asks for: per
    // sample an fp32 dq accumulator [S, A, D] and softmax row sums [S, A], dK and dV per query
    // head with grouped-query heads, two int32 sequence lengths; and 256 bytes of its own.
    const Bytes per_sample_scratch = flash_bwd_scratch_bytes(1, d.S, d.A, d.K, d.D, d.act) -
                                     flash_bwd_scratch_bytes(0, d.S, d.A, d.K, d.D, d.act);
    led.add("flash.scratch", kTransient, per_sample_scratch);
    scratch_fixed = flash_bwd_scratch_bytes(0, d.S, d.A, d.K, d.D, d.act);
    at("flash attention backward");
    scratch_fixed = 0;
    led.drop("flash.scratch");
    led.drop("d.attn.y");
    led.drop("attn.qkv");
    led.drop("attn.y");
    led.drop("attn.lse");
  }
}

// Walks the backward of one block (reverse order of its forward), starting from `led`, which holds
// the block's saved tensors as the recompute mode keeps them and the incoming gradient "dx_out".
// Records a point at every op, after its outputs are allocated and before anything is freed.
std::vector<BlockPoint> walk_block_backward(Ledger& led, const Dims& d, const Part& part) {
  std::vector<BlockPoint> points;
  Bytes grads = 0;
  Bytes scratch_fixed = 0;  // an op's scratch that does not grow with the batch
  auto at = [&](std::string_view op) {
    BlockPoint p{op, {}, grads, scratch_fixed};
    for (const Ledger::Entry& x : led.entries()) add_to(p.live, x.component, x.bytes);
    points.push_back(std::move(p));
  };
  auto grad = [&](Bytes params) {
    grads = checked_add(grads, checked_mul(params, d.e, "grads"), "grads");
  };
  const Bytes hidden = rows(d, d.H, d.e);
  const Bytes ffn = rows(d, d.F, d.e);
  const Bytes bias_h = d.biases ? d.H : 0, bias_f = d.biases ? d.F : 0, bias_q = d.biases ? d.Q : 0;

  // Full recompute replays the block's forward from its saved input before its backward.
  if (d.recompute == Recompute::full) {
    Ledger all;
    add_block_saved(all, d, kRecomputed, kRecomputed);
    for (const Ledger::Entry& x : all.entries())
      if (in_part(x.name, part, d) && !led.has(x.name)) led.add(x.name, x.component, x.bytes);
    at("replay forward");
  }

  if (part.mlp) {
    // The gradient entering the MLP's output projection: through the dropout mask when there is
    // one.
    const std::string_view d_mlp_out = branch_dropout_backward(led, d, "dx_out", true, at);
    if (d.gpt) {
      led.add("d.mlp.gelu.out", kTransient, ffn);
      grad(checked_mul(d.F, d.H, "fc2") + bias_h);
      at("mlp.proj linear backward");
      led.drop("mlp.gelu.out");
      if (d_mlp_out != "dx_out") led.drop(d_mlp_out);
      led.add("d.mlp.fc.out", kTransient, ffn);
      at("gelu backward");
      led.drop("d.mlp.gelu.out");
      led.drop("mlp.fc.out");
      led.add("d.norm2.out", kTransient, hidden);
      grad(checked_mul(d.F, d.H, "fc1") + bias_f);
      at("mlp.fc linear backward");
      led.drop("d.mlp.fc.out");
      led.drop("norm2.out");
    } else {
      led.add("d.mlp.swiglu", kTransient, ffn);
      grad(checked_mul(d.F, d.H, "down"));
      at("mlp.down linear backward");
      led.drop("mlp.swiglu");
      if (d_mlp_out != "dx_out") led.drop(d_mlp_out);
      led.add("d.mlp.gate", kTransient, ffn);
      led.add("d.mlp.up", kTransient, ffn);
      at("swiglu backward");
      led.drop("d.mlp.swiglu");
      led.drop("mlp.gate");
      led.drop("mlp.up");
      led.add("d.norm2.out.up", kTransient, hidden);
      grad(checked_mul(d.F, d.H, "up"));
      at("mlp.up linear backward");
      led.drop("d.mlp.up");
      led.add("d.norm2.out.gate", kTransient, hidden);
      grad(checked_mul(d.F, d.H, "gate"));
      at("mlp.gate linear backward");
      led.drop("d.mlp.gate");
      led.drop("norm2.out");
      led.add("d.norm2.out", kTransient, hidden);
      at("mlp input gradient sum");
      led.drop("d.norm2.out.up");
      led.drop("d.norm2.out.gate");
    }
  }
  if (part.mlp_rest) {
    led.add("d.x_mid.norm", kTransient, hidden);
    grad(d.norm_params);
    at("norm2 backward");
    led.drop("d.norm2.out");
    led.drop("x_mid");
    led.drop("norm2.stats");
    led.add("dx_mid", kTransient, hidden);
    at("mlp residual gradient");
    led.drop("dx_out");
    led.drop("d.x_mid.norm");
  }
  if (part.attn_rest) {
    const std::string_view d_proj_out = branch_dropout_backward(led, d, "dx_mid", false, at);
    led.add("d.attn.y", kTransient, hidden);
    grad(checked_mul(d.H, d.H, "proj") + bias_h);
    at("attn.proj linear backward");
    if (d_proj_out != "dx_mid") led.drop(d_proj_out);
    if (d.eager) led.drop("attn.y");  // flash backward reads the output again
  }
  if (part.attn_core) {
    attention_core_backward(led, d, scratch_fixed, at);
  }
  if (part.attn_rest) {
    std::string_view d_qkv = "d.attn.qkv";
    if (!d.gpt) {
      led.add("d.attn.qkv.unrotated", kTransient, rows(d, d.Q, d.e));
      at("rope backward");
      led.drop("d.attn.qkv");
      d_qkv = "d.attn.qkv.unrotated";
    }
    led.add("d.norm1.out", kTransient, hidden);
    grad(checked_mul(d.Q, d.H, "qkv") + bias_q);
    at("attn.qkv linear backward");
    led.drop(d_qkv);
    led.drop("norm1.out");
    led.add("d.x_in.norm", kTransient, hidden);
    grad(d.norm_params);
    at("norm1 backward");
    led.drop("d.norm1.out");
    led.drop("x_in");
    led.drop("norm1.stats");
    led.add("dx_in", kTransient, hidden);
    at("attention residual gradient");
    led.drop("dx_mid");
    led.drop("d.x_in.norm");
  }
  return points;
}

// Saved bytes of one block whose backward has not started, split into activations and statistics.
struct BlockSaved {
  Bytes saved = 0, stats = 0;
};
BlockSaved block_saved_bytes(const Dims& d) {
  Ledger led;
  add_part_start(led, d, Part{});
  BlockSaved out;
  for (const Ledger::Entry& x : led.entries()) {
    Bytes& total = x.component == kStats ? out.stats : out.saved;
    total = checked_add(total, x.bytes, "saved bytes of a block");
  }
  return out;
}

// Collects the points of the walk.
class Walk {
 public:
  Walk(FixedState fixed, Bytes e) : fixed_(fixed), e_(e) {}

  void grad(Bytes params) {
    grads_ = checked_add(grads_, checked_mul(params, e_, "grads"), "grads");
  }
  void add_grad_bytes(Bytes bytes) { grads_ = checked_add(grads_, bytes, "grads"); }
  void set_grad_bytes(Bytes bytes) { grads_ = bytes; }
  void release_workspace() { fixed_.workspace = 0; }

  // Records a point: the model-level ledger, plus `extra` per-sample components and gradient
  // bytes that only this point holds (the block in backward).
  void at(std::string_view op, const Ledger& led, const Shares& extra = {}, Bytes extra_grads = 0, std::string_view where = {}, std::int64_t block = -1,
          Bytes extra_workspace = 0, Bytes dequant = 0) {
    Point p;
    p.where = where;
    p.block = block;
    p.op = op;
    add_to(p.fixed, kWeights, fixed_.weights);
    add_to(p.fixed, kQuantized, fixed_.quantized);
    add_to(p.fixed, kFrozen, fixed_.frozen);
    add_to(p.fixed, kAdapters, fixed_.adapters);
    add_to(p.fixed, kMasterWeights, fixed_.master);
    add_to(p.fixed, kOptimizerState, fixed_.optimizer);
    add_to(p.fixed, kPaged, fixed_.paged);
    const Bytes grads = fixed_.persistent_grads >= 0 ? fixed_.persistent_grads
                                                     : checked_add(grads_, extra_grads, "grads");
    add_to(p.fixed, fixed_.finetune ? kAdapterGrads : kGradients, grads);
    add_to(p.fixed, kContext, fixed_.context);
    add_to(p.fixed, kWorkspace, checked_add(fixed_.workspace, extra_workspace, "workspace"));
    add_to(p.fixed, kDequant, dequant);
    for (const Ledger::Entry& x : led.entries()) add_to(p.per_sample, x.component, x.bytes);
    for (const Share& c : extra) add_to(p.per_sample, c.component, c.bytes);
    p.fixed_total = device_sum(p.fixed);
    p.per_sample_total = sum(p.per_sample);
    points_.push_back(std::move(p));
  }
  std::vector<Point>& points() { return points_; }

 private:
  FixedState fixed_;
  Bytes e_;
  Bytes grads_ = 0;
  std::vector<Point> points_;
};

// Points of one block's backward, with `others` (per-sample components of everything outside the
// block: the other blocks' saved tensors, the step's inputs) added to each.
void record_block(Walk& walk, const Dims& d, const Part& part, std::string_view where,
                  std::int64_t index, const Ledger& outside, const Shares& others, Ledger block) {
  for (const BlockPoint& p : walk_block_backward(block, d, part)) {
    Shares live = others;
    for (const Share& c : p.live) add_to(live, c.component, c.bytes);
    walk.at(p.op, outside, live, p.grads, where, index, p.scratch, p.dequant);
  }
}

// The element counts of one block's parameter tensors (mlp: its MLP's alone), as the program
// allocates them: each gets its own optimizer state, whose form depends on its size.
void block_tensors(std::vector<Bytes>& out, const Dims& d, const ModelConfig& m, bool mlp_only) {
  const Bytes FH = checked_mul(d.F, d.H, "ffn x hidden");
  if (d.gpt) {
    if (!mlp_only)
      out.insert(out.end(), {d.H, d.H, checked_mul(d.Q, d.H, "qkv"), d.Q,
                             checked_mul(d.H, d.H, "proj"), d.H, d.H, d.H});
    out.insert(out.end(), {FH, d.F, FH, d.H});
  } else {
    if (!mlp_only) {
      out.insert(out.end(), {d.H, checked_mul(d.Q, d.H, "qkv")});
      if (m.qkv_bias) out.push_back(d.Q);
      out.insert(out.end(), {checked_mul(d.H, d.H, "o"), d.H});
    }
    out.insert(out.end(), {FH, FH, FH});
  }
}

// The trainable tensors of a full-training step over `cfg.scope`.
std::vector<Bytes> trainable_tensors(const RunConfig& cfg, const Dims& d) {
  std::vector<Bytes> out;
  const ModelConfig& m = cfg.model;
  switch (cfg.scope) {
    case Scope::attention:
      return out;
    case Scope::mlp:
      block_tensors(out, d, m, true);
      return out;
    case Scope::layer:
      block_tensors(out, d, m, false);
      return out;
    case Scope::model:
      break;
  }
  out.push_back(checked_mul(d.V, d.H, "vocab x hidden"));
  if (d.positions > 0) out.push_back(checked_mul(d.positions, d.H, "positions x hidden"));
  for (Bytes l = 0; l < d.L; ++l) block_tensors(out, d, m, false);
  out.insert(out.end(),
             d.gpt ? std::initializer_list<Bytes>{d.H, d.H} : std::initializer_list<Bytes>{d.H});
  if (!m.tied_embeddings) out.push_back(checked_mul(d.V, d.H, "vocab x hidden"));
  return out;
}

// Optimizer state of one tensor of `numel` elements, on the device and in managed memory:
// torch AdamW fp32 m and v; bitsandbytes' 8-bit AdamW one byte each plus an fp32 absmax per 256
// (fp32 moments under 4096 elements); a paged optimizer keeps m and v of tensors from 1e5
// elements in managed memory (core/quant.h); SGD fp32 momentum. Each is a tensor of its own (see
// held()).
void add_state(FixedState& f, Optimizer opt, Bytes numel, bool own_segments = false) {
  if (opt == Optimizer::none) return;
  if (opt == Optimizer::sgd) {
    f.optimizer = checked_add(f.optimizer, held(checked_mul(numel, 4, "momentum"), own_segments),
                              "optimizer state");
    return;
  }
  const bool eight_bit = is_8bit(opt) && optimizer_state_is_8bit(numel);
  const Bytes moments =
      2 * held(checked_mul(numel, eight_bit ? 1 : 4, "optimizer moment"), own_segments);
  const Bytes absmax =
      eight_bit ? 2 * held(checked_mul(quant_blocks(numel, kOptimizer8bitBlock), 4, "absmax"),
                           own_segments)
                : 0;
  Bytes& where = is_paged(opt) && numel >= kPagedMinNumel ? f.paged : f.optimizer;
  where = checked_add(where, moments, "optimizer state");
  f.optimizer = checked_add(f.optimizer, absmax, "optimizer state");
}

// Parameters and their state. Without an optimizer there is no step to keep fp32 masters for.
FixedState fixed_state(const RunConfig& cfg, const DeviceOverhead& overhead, Bytes params,
                       bool has_gemms) {
  const Dims d = dims_of(cfg);
  const bool step = cfg.optimizer != Optimizer::none;
  FixedState f;
  f.weights = checked_mul(params, d.e, "weight bytes");
  f.master =
      step && has_master_weights(cfg.dtype) ? checked_mul(params, 4, "master weight bytes") : 0;
  if (cfg.optimizer == Optimizer::adamw || cfg.optimizer == Optimizer::sgd) {
    // One size for every tensor: the state is bytes per parameter.
    add_state(f, cfg.optimizer, params);
  } else {
    for (Bytes numel : trainable_tensors(cfg, d)) add_state(f, cfg.optimizer, numel);
  }
  f.context = overhead.context;
  // The workspace is a tensor of the program only when some op is a GEMM.
  f.workspace = has_gemms ? overhead.gemm_workspace : 0;
  if (cfg.grad_accum > 1) f.persistent_grads = checked_mul(params, d.e, "grads");
  return f;
}

// The whole model: forward ends with every block's saved tensors, the final norm and the logits;
// backward runs loss, lm head, final norm, blocks L-1 .. 0, embeddings; then the optimizer step.
std::vector<Point> walk_model(const RunConfig& cfg, const DeviceOverhead& overhead) {
  const Dims d = dims_of(cfg);
  const Params p = params_of(cfg, d);
  Walk walk(fixed_state(cfg, overhead, p.total, true), d.e);
  const Bytes hidden = rows(d, d.H, d.e);

  Ledger led;
  led.add("tokens", kInputs, rows(d, 2, 4));  // tokens and targets, i32 each
  led.pin("tokens");
  if (d.dropout) led.add("embed.mask", kEmbedMask, rows(d, d.H, 1));
  led.add("x_L", kFinalBlockOutput, hidden);
  led.add("final_norm.out", kFinalNorm, hidden);
  led.add("final_norm.stats", kFinalNorm, rows(d, 1, d.norm_stats));
  led.add("logits", kLogits, rows(d, d.V, d.e));
  led.add("ce.lse", kLogits, rows(d, 1, 4));

  // Every block's saved tensors, apart from the block whose backward is being followed.
  const BlockSaved saved = block_saved_bytes(d);
  auto other_blocks = [&](Bytes count) {
    Shares list;
    add_to(list, kSaved, checked_mul(count, saved.saved, "saved activations"));
    add_to(list, kStats, checked_mul(count, saved.stats, "norm statistics"));
    return list;
  };
  const Shares all_blocks = other_blocks(d.L);

  // The loss backward: dlogits [B*S, V] next to the logits it is computed from.
  led.add("dlogits", kTransient, rows(d, d.V, d.e));
  walk.at("cross-entropy backward", led, all_blocks);
  led.drop("logits");
  led.drop("ce.lse");
  led.add("d.final_norm.out", kTransient, hidden);
  walk.grad(p.lm_head);
  walk.at("lm head linear backward", led, all_blocks);
  led.drop("dlogits");
  led.drop("final_norm.out");
  led.add("dx_L", kTransient, hidden);
  walk.grad(p.final_norm);
  walk.at("final norm backward", led, all_blocks);
  led.drop("d.final_norm.out");
  led.drop("x_L");
  led.drop("final_norm.stats");
  led.drop("dx_L");  // handed to the top block as its incoming gradient

  // The live bytes while block l is in backward are linear in l (each finished block adds its
  // gradients and removes its saved tensors), so the extremes are the top and the bottom block.
  const Bytes block_grads = checked_mul(p.block, d.e, "block grads");
  auto block_ledger = [&] {
    Ledger block;
    add_part_start(block, d, Part{});
    block.add("dx_out", kTransient, hidden);
    return block;
  };
  const Part whole{};
  record_block(walk, d, whole, "block", d.L - 1, led, other_blocks(d.L - 1), block_ledger());
  if (d.L > 1) {
    walk.add_grad_bytes(checked_mul(d.L - 1, block_grads, "block grads"));
    record_block(walk, d, whole, "block", 0, led, {}, block_ledger());
  }

  // The last GEMM has run; the embedding backward writes the untied table and the positions. It
  // sorts the rows by token in the GEMM workspace, which therefore lives until it has run.
  walk.add_grad_bytes(block_grads);
  led.add("dx0", kTransient, hidden);
  if (d.dropout) {
    led.add("d.embed.out", kTransient, hidden);
    walk.at("embedding dropout backward", led);
    led.drop("dx0");
    led.drop("embed.mask");
  }
  walk.grad(p.embeddings);
  walk.at("embedding backward", led);
  walk.release_workspace();
  led.drop_if("dx0");
  led.drop_if("d.embed.out");
  walk.at(end_of_step(cfg), led);
  return walk.points();
}

// ---- fine-tuning (docs/memory-model.md, "Fine-tuning") ------------------------------------------

// One block linear of a fine-tuning recipe: its modules (rows each), those with an adapter.
struct FtLinear {
  std::string_view name;  // "mlp.down"
  Bytes out = 0, in = 0;
  std::vector<Bytes> module_rows;
  std::vector<Bytes> adapter_rows;  // rows of each targeted module
  bool adapted() const { return !adapter_rows.empty(); }
};

struct FtBlock {
  FtLinear qkv, proj, fc, up, out;  // llama: fc is gate; gpt has no up
};

FtBlock ft_block(const RunConfig& cfg, const Dims& d) {
  const Arch arch = cfg.model.arch;
  auto make = [&](std::string_view name, Bytes in,
                  std::initializer_list<std::pair<LoraModule, Bytes>> modules) {
    FtLinear lin;
    lin.name = name;
    lin.in = in;
    for (const auto& [module, rows] : modules) {
      lin.out += rows;
      lin.module_rows.push_back(rows);
      if (lora_targets_module(cfg.lora_targets, arch, module)) lin.adapter_rows.push_back(rows);
    }
    return lin;
  };
  FtBlock b;
  if (d.gpt) {
    b.qkv = make("attn.qkv", d.H, {{LoraModule::c_attn, d.Q}});
    b.proj = make("attn.proj", d.H, {{LoraModule::attn_c_proj, d.H}});
    b.fc = make("mlp.fc", d.H, {{LoraModule::c_fc, d.F}});
    b.out = make("mlp.proj", d.F, {{LoraModule::mlp_c_proj, d.H}});
  } else {
    b.qkv =
        make("attn.qkv", d.H,
             {{LoraModule::q, d.A * d.D}, {LoraModule::k, d.K * d.D}, {LoraModule::v, d.K * d.D}});
    b.proj = make("attn.o", d.H, {{LoraModule::o, d.H}});
    b.fc = make("mlp.gate", d.H, {{LoraModule::gate, d.F}});
    b.up = make("mlp.up", d.H, {{LoraModule::up, d.F}});
    b.out = make("mlp.down", d.F, {{LoraModule::down, d.H}});
  }
  return b;
}

std::vector<const FtLinear*> ft_linears(const FtBlock& b, bool gpt) {
  if (gpt) return {&b.qkv, &b.proj, &b.fc, &b.out};
  return {&b.qkv, &b.proj, &b.fc, &b.up, &b.out};
}

// Which tensors of a block need a gradient: those downstream of an adapter (build.cpp
// block_grad); the first block's input needs none (the embeddings are frozen).
struct FtGrad {
  bool x_in, qkv, proj, x_mid, fc, up, out;
};
FtGrad ft_grad(const FtBlock& b, bool x_in, bool gpt) {
  FtGrad g{};
  g.x_in = x_in;
  g.qkv = x_in || b.qkv.adapted();
  g.proj = g.qkv || b.proj.adapted();
  g.x_mid = x_in || g.proj;
  g.fc = g.x_mid || b.fc.adapted();
  g.up = !gpt && (g.x_mid || b.up.adapted());
  g.out = g.fc || g.up || b.out.adapted();
  return g;
}

// Names of the adapters' saved x A^T, one per adapter slot of a block (at most 7).
constexpr std::string_view kXa[] = {"xa.0", "xa.1", "xa.2", "xa.3", "xa.4", "xa.5", "xa.6", "xa.7"};
constexpr std::string_view kLoraX[] = {"lora.x.0", "lora.x.1", "lora.x.2", "lora.x.3",
                                       "lora.x.4", "lora.x.5", "lora.x.6", "lora.x.7"};
constexpr std::string_view kLoraMask[] = {"lora.mask.0", "lora.mask.1", "lora.mask.2",
                                          "lora.mask.3", "lora.mask.4", "lora.mask.5",
                                          "lora.mask.6", "lora.mask.7"};

// Adapter slots of each linear, in block order.
int ft_first_slot(const FtBlock& b, const FtLinear* lin, bool gpt) {
  int slot = 0;
  for (const FtLinear* x : ft_linears(b, gpt)) {
    if (x == lin) return slot;
    slot += static_cast<int>(x->adapter_rows.size());
  }
  return slot;
}

// What a block's forward keeps for its backward under fine-tuning, before the recompute mode
// filters it: what some backward op reads (build.cpp forward_only_activations_are_transient).
void add_ft_block_saved(Ledger& led, const Dims& d, const FtBlock& b, const FtGrad& g, Bytes rank,
                        bool lora_dropout, MemoryComponent component,
                        MemoryComponent stats_component) {
  const Bytes hidden = rows(d, d.H, d.e);
  auto adapter_inputs = [&](const FtLinear& lin, std::string_view x, Bytes width) {
    if (!lin.adapted()) return;
    if (!lora_dropout) {
      if (!led.has(x)) led.add(x, component, rows(d, width, d.e));
      return;
    }
    const int first = ft_first_slot(b, &lin, d.gpt);
    for (std::size_t k = 0; k < lin.adapter_rows.size(); ++k) {
      led.add(kLoraX[first + static_cast<int>(k)], component, rows(d, width, d.e));
      led.add(kLoraMask[first + static_cast<int>(k)], component, rows(d, width, 1));
    }
  };
  if (g.x_in) led.add("x_in", component, hidden);
  if (g.x_in) led.add("norm1.stats", stats_component, rows(d, 1, d.norm_stats));
  adapter_inputs(b.qkv, "norm1.out", d.H);
  if (g.qkv) {
    led.add("attn.qkv", component, rows(d, d.Q, d.e));
    add_core_saved(led, d, component);
  }
  if ((!d.eager && g.qkv) || b.proj.adapted()) led.add("attn.y", component, hidden);
  adapter_inputs(b.proj, "attn.y", d.H);
  if (d.dropout && g.x_mid) led.add("attn.proj.mask", component, rows(d, d.H, 1));
  if (g.x_mid) {
    led.add("x_mid", component, hidden);
    led.add("norm2.stats", stats_component, rows(d, 1, d.norm_stats));
  }
  adapter_inputs(b.fc, "norm2.out", d.H);
  if (!d.gpt) adapter_inputs(b.up, "norm2.out", d.H);
  if (d.gpt) {
    if (g.fc) led.add("mlp.fc.out", component, rows(d, d.F, d.e));
    adapter_inputs(b.out, "mlp.gelu.out", d.F);
  } else {
    if (g.fc || g.up) {
      led.add("mlp.gate", component, rows(d, d.F, d.e));
      led.add("mlp.up", component, rows(d, d.F, d.e));
    }
    adapter_inputs(b.out, "mlp.swiglu", d.F);
  }
  if (d.dropout) led.add("mlp.mask", component, rows(d, d.H, 1));
  int slot = 0;
  for (const FtLinear* lin : ft_linears(b, d.gpt))
    for (std::size_t k = 0; k < lin->adapter_rows.size(); ++k)
      led.add(kXa[slot++], component, rows(d, rank, d.e));
}

// The saved tensors as the recompute mode keeps them: full keeps the block input (the replay
// reads it), selective drops the S x S tensors.
void add_ft_part_start(Ledger& led, const Dims& d, const FtBlock& b, const FtGrad& g, Bytes rank,
                       bool lora_dropout) {
  Ledger all;
  add_ft_block_saved(all, d, b, g, rank, lora_dropout, kSaved, kStats);
  if (d.recompute == Recompute::full) {
    led.add("x_in", kSaved, rows(d, d.H, d.e));
    return;
  }
  for (const Ledger::Entry& x : all.entries()) {
    if (d.recompute == Recompute::selective && is_square(x.name)) continue;
    led.add(x.name, x.component, x.bytes);
  }
}

struct FtQuant {
  QuantKind kind = QuantKind::none;
  bool nested = false;
};

// The dequantised copy of a linear's weight, and the largest rebuilt absmax of its modules.
Bytes dequant_bytes(const Dims& d, const FtLinear& lin, const FtQuant& q, bool with_scratch) {
  if (q.kind == QuantKind::none) return 0;
  Bytes bytes = checked_mul(checked_mul(lin.out, lin.in, "dequantised weight"), d.e, "dequant");
  if (with_scratch) {
    Bytes scratch = 0;
    for (Bytes r : lin.module_rows)
      scratch = std::max(
          scratch, quantized_weight_bytes(checked_mul(r, lin.in, "module"), r, q.kind, q.nested)
                       .nested_absmax_transient);
    bytes = checked_add(bytes, scratch, "dequant");
  }
  return bytes;
}

// A fine-tuning block's backward (build.cpp block_bwd): frozen linears back-propagate through the
// weight alone (dequantised first when quantised), adapters write their gradients.
std::vector<BlockPoint> walk_ft_block_backward(Ledger& led, const Dims& d, const FtBlock& b,
                                               const FtGrad& g, const FtQuant& q, Bytes rank,
                                               bool lora_dropout) {
  std::vector<BlockPoint> points;
  Bytes grads = 0, scratch_fixed = 0, dequant = 0;
  auto at = [&](std::string_view op) {
    BlockPoint p{op, {}, grads, scratch_fixed, dequant};
    for (const Ledger::Entry& x : led.entries()) add_to(p.live, x.component, x.bytes);
    points.push_back(std::move(p));
  };
  const Bytes hidden = rows(d, d.H, d.e);
  const Bytes ffn = rows(d, d.F, d.e);

  // A frozen linear's backward: dx (when wanted) through the weight, then each adapter.
  auto linear = [&](const FtLinear& lin, std::string_view dx, Bytes dx_bytes, std::string_view x) {
    if (!dx.empty()) {
      dequant = dequant_bytes(d, lin, q, true);
      if (dequant > 0) at("dequantize (backward)");
      dequant = dequant_bytes(d, lin, q, false);
      led.add(dx, kTransient, dx_bytes);
      at("linear dgrad");
      dequant = 0;
    }
    const int first = ft_first_slot(b, &lin, d.gpt);
    for (std::size_t k = 0; k < lin.adapter_rows.size(); ++k) {
      const Bytes r = lin.adapter_rows[k];
      grads = checked_add(grads,
                          checked_mul(checked_mul(rank, checked_add(lin.in, r, "A+B"), "adapter"),
                                      d.e, "adapter grads"),
                          "grads");
      led.add("d.xa", kTransient, rows(d, rank, d.e));
      const int slot = first + static_cast<int>(k);
      if (lora_dropout && !dx.empty()) {
        led.add("d.lora.x", kTransient, rows(d, lin.in, d.e));
        at("lora backward");
        led.drop("d.xa");
        led.add("d.lora.in", kTransient, rows(d, lin.in, d.e));
        at("lora dropout backward");
        led.drop("d.lora.x");
        led.add("d.lora.sum", kTransient, rows(d, lin.in, d.e));
        at("lora input gradient sum");
        led.drop("d.lora.in");
        led.drop("d.lora.sum");  // stands in for the dx it replaces (same bytes)
      } else {
        at("lora backward");
        led.drop("d.xa");
      }
      led.drop(kXa[slot]);
      if (lora_dropout) {
        led.drop(kLoraX[slot]);
        led.drop(kLoraMask[slot]);
      }
    }
    if (!lora_dropout && lin.adapted()) led.drop_if(x);
  };

  if (d.recompute == Recompute::full) {
    Ledger all;
    add_ft_block_saved(all, d, b, g, rank, lora_dropout, kRecomputed, kRecomputed);
    for (const Ledger::Entry& x : all.entries())
      if (!led.has(x.name)) led.add(x.name, x.component, x.bytes);
    Bytes most = 0;
    for (const FtLinear* lin : ft_linears(b, d.gpt))
      most = std::max(most, dequant_bytes(d, *lin, q, true));
    dequant = most;
    at("replay forward");
    dequant = 0;
  }

  // MLP.
  const std::string_view d_mlp_out = branch_dropout_backward(led, d, "dx_out", true, at);
  if (d.gpt) {
    linear(b.out, g.fc ? "d.mlp.gelu.out" : "", ffn, "mlp.gelu.out");
    if (d_mlp_out != "dx_out") led.drop(d_mlp_out);
    if (g.fc) {
      led.add("d.mlp.fc.out", kTransient, ffn);
      at("gelu backward");
      led.drop("d.mlp.gelu.out");
      led.drop("mlp.fc.out");
      linear(b.fc, g.x_mid ? "d.norm2.out" : "", hidden, "norm2.out");
      led.drop("d.mlp.fc.out");
    }
  } else {
    const bool swiglu = g.fc || g.up;
    linear(b.out, swiglu ? "d.mlp.swiglu" : "", ffn, "mlp.swiglu");
    if (d_mlp_out != "dx_out") led.drop(d_mlp_out);
    if (swiglu) {
      led.add("d.mlp.gate", kTransient, ffn);
      led.add("d.mlp.up", kTransient, ffn);
      at("swiglu backward");
      led.drop("d.mlp.swiglu");
      led.drop("mlp.gate");
      led.drop("mlp.up");
      linear(b.up, g.x_mid ? "d.norm2.out.up" : "", hidden, "");
      led.drop("d.mlp.up");
      linear(b.fc, g.x_mid ? "d.norm2.out.gate" : "", hidden, "norm2.out");
      led.drop("d.mlp.gate");
      if (g.x_mid) {
        led.add("d.norm2.out", kTransient, hidden);
        at("mlp input gradient sum");
        led.drop("d.norm2.out.up");
        led.drop("d.norm2.out.gate");
      }
    }
  }
  led.drop_if("norm2.out");
  if (!g.x_mid) return points;
  led.add("d.x_mid.norm", kTransient, hidden);
  at("norm2 backward");
  led.drop("d.norm2.out");
  led.drop("x_mid");
  led.drop("norm2.stats");
  led.add("dx_mid", kTransient, hidden);
  at("mlp residual gradient");
  led.drop("dx_out");
  led.drop("d.x_mid.norm");

  const std::string_view d_proj_out = branch_dropout_backward(led, d, "dx_mid", false, at);
  linear(b.proj, g.qkv ? "d.attn.y" : "", hidden, d.eager ? "attn.y" : "");
  if (d_proj_out != "dx_mid") led.drop(d_proj_out);
  if (!g.x_in) led.drop("dx_mid");  // nothing below adds into it
  if (d.eager) led.drop_if("attn.y");
  if (!g.qkv) return points;

  attention_core_backward(led, d, scratch_fixed, at);
  std::string_view d_qkv = "d.attn.qkv";
  if (!d.gpt) {
    led.add("d.attn.qkv.unrotated", kTransient, rows(d, d.Q, d.e));
    at("rope backward");
    led.drop("d.attn.qkv");
    d_qkv = "d.attn.qkv.unrotated";
  }
  linear(b.qkv, g.x_in ? "d.norm1.out" : "", hidden, "norm1.out");
  led.drop(d_qkv);
  led.drop_if("norm1.out");
  if (!g.x_in) return points;
  led.add("d.x_in.norm", kTransient, hidden);
  at("norm1 backward");
  led.drop("d.norm1.out");
  led.drop("x_in");
  led.drop("norm1.stats");
  led.add("dx_in", kTransient, hidden);
  at("attention residual gradient");
  return points;
}

// The fixed part of a fine-tuning step: the frozen base, quantised or not, the adapters with
// their master copies and optimizer state.
FixedState ft_fixed_state(const RunConfig& cfg, const DeviceOverhead& overhead, const Dims& d,
                          const Params& p, const FtBlock& b, const FtQuant& q) {
  FixedState f;
  f.finetune = true;
  f.context = overhead.context;
  f.workspace = overhead.gemm_workspace;
  Bytes frozen = p.total;
  Bytes quantized = 0;
  const bool own = cfg.allocator == AllocatorKind::direct;
  for (const FtLinear* lin : ft_linears(b, d.gpt)) {
    if (q.kind == QuantKind::none) continue;
    frozen -= checked_mul(checked_mul(lin->out, lin->in, "linear"), d.L, "linears");
    for (Bytes r : lin->module_rows) {
      const QuantizedWeightBytes w =
          quantized_weight_bytes(checked_mul(r, lin->in, "module"), r, q.kind, q.nested);
      // Codes and scales are tensors of their own (an fp32 absmax of a [11008, 4096] module is
      // 2.75 MiB); the constants, a few hundred bytes each, are counted as they are.
      const Bytes parts = checked_add(held(w.data, own) + held(w.absmax, own),
                                      held(w.absmax2, own) + w.code_and_offset, "quantised parts");
      quantized = checked_add(quantized, parts, "quantised weights");
    }
  }
  f.frozen = checked_mul(frozen, d.e, "frozen weights");
  f.quantized = checked_mul(quantized, d.L, "quantised weights");
  const bool masters = cfg.optimizer != Optimizer::none && has_master_weights(cfg.dtype);
  for (Bytes l = 0; l < d.L; ++l)
    for (const FtLinear* lin : ft_linears(b, d.gpt))
      for (Bytes r : lin->adapter_rows)
        for (const Bytes numel : {checked_mul(cfg.lora_rank, lin->in, "lora A"),
                                  checked_mul(r, cfg.lora_rank, "lora B")}) {
          f.adapters = checked_add(f.adapters, held(checked_mul(numel, d.e, "adapter"), own),
                                   "adapters");
          if (masters)
            f.master = checked_add(f.master, held(checked_mul(numel, 4, "master"), own), "masters");
          add_state(f, cfg.optimizer, numel, own);
        }
  if (cfg.grad_accum > 1) f.persistent_grads = f.adapters;
  return f;
}

// The whole model under fine-tuning: loss, lm head (input gradient only), final norm, then the
// blocks down to the first, which needs no input gradient; no embedding backward.
std::vector<Point> walk_finetune(const RunConfig& cfg, const DeviceOverhead& overhead) {
  const Dims d = dims_of(cfg);
  const Params p = params_of(cfg, d);
  const FtBlock b = ft_block(cfg, d);
  FtQuant q;
  q.kind = base_quant(cfg);
  q.nested = is_4bit(q.kind) && cfg.double_quant == Toggle::on;
  const Bytes rank = cfg.lora_rank;
  const bool lora_dropout = cfg.lora_dropout > 0.0;
  Walk walk(ft_fixed_state(cfg, overhead, d, p, b, q), d.e);
  const Bytes hidden = rows(d, d.H, d.e);

  Ledger led;
  led.add("tokens", kInputs, rows(d, 2, 4));
  led.pin("tokens");
  led.add("x_L", kFinalBlockOutput, hidden);
  led.add("final_norm.stats", kFinalNorm, rows(d, 1, d.norm_stats));
  led.add("logits", kLogits, rows(d, d.V, d.e));
  led.add("ce.lse", kLogits, rows(d, 1, 4));

  auto saved_of = [&](bool x_in) {
    Ledger one;
    add_ft_part_start(one, d, b, ft_grad(b, x_in, d.gpt), rank, lora_dropout);
    BlockSaved out;
    for (const Ledger::Entry& x : one.entries()) {
      Bytes& total = x.component == kStats ? out.stats : out.saved;
      total = checked_add(total, x.bytes, "saved bytes of a block");
    }
    return out;
  };
  const BlockSaved first = saved_of(false), later = saved_of(true);
  // Saved tensors of blocks 0 .. count-1.
  auto below = [&](Bytes count) {
    Shares list;
    if (count <= 0) return list;
    add_to(list, kSaved,
           checked_add(first.saved, checked_mul(count - 1, later.saved, "saved"), "saved"));
    add_to(list, kStats,
           checked_add(first.stats, checked_mul(count - 1, later.stats, "stats"), "stats"));
    return list;
  };
  const auto all_blocks = below(d.L);

  led.add("dlogits", kTransient, rows(d, d.V, d.e));
  walk.at("cross-entropy backward", led, all_blocks);
  led.drop("logits");
  led.drop("ce.lse");
  led.add("d.final_norm.out", kTransient, hidden);
  walk.at("lm head linear dgrad", led, all_blocks);
  led.drop("dlogits");
  led.add("dx_L", kTransient, hidden);
  walk.at("final norm backward", led, all_blocks);
  led.drop("d.final_norm.out");
  led.drop("x_L");
  led.drop("final_norm.stats");
  led.drop("dx_L");

  // A gradient per adapter tensor, held like the adapter itself.
  Bytes block_grads = 0;
  for (const FtLinear* lin : ft_linears(b, d.gpt))
    for (Bytes r : lin->adapter_rows)
      for (const Bytes numel : {checked_mul(rank, lin->in, "lora A"), checked_mul(r, rank, "lora B")})
        block_grads = checked_add(
            block_grads,
            held(checked_mul(numel, d.e, "adapter grad"), cfg.allocator == AllocatorKind::direct),
            "adapter grads");
  // Block l in backward: blocks below it hold their saved tensors, those above have written
  // their gradients; linear in l from block 1 up, so blocks L-1, 1 and the different block 0.
  auto record = [&](Bytes l) {
    Ledger block;
    const FtGrad g = ft_grad(b, l > 0, d.gpt);
    add_ft_part_start(block, d, b, g, rank, lora_dropout);
    block.add("dx_out", kTransient, hidden);
    const auto others = below(l);
    walk.set_grad_bytes(checked_mul(d.L - 1 - l, block_grads, "block grads"));
    for (const BlockPoint& pt : walk_ft_block_backward(block, d, b, g, q, rank, lora_dropout)) {
      Shares live = others;
      for (const Share& c : pt.live) add_to(live, c.component, c.bytes);
      walk.at(pt.op, led, live, pt.grads, "block", l, pt.scratch, pt.dequant);
    }
  };
  record(d.L - 1);
  if (d.L > 2) record(1);
  if (d.L > 1) record(0);
  walk.set_grad_bytes(checked_mul(d.L, block_grads, "block grads"));
  walk.release_workspace();
  walk.at(end_of_step(cfg), led);
  return walk.points();
}

// One block, its MLP or its attention core alone, with inputs that live for the whole step (the
// activation entering the part and the gradient arriving at its output), and the optimizer step
// over the part's own parameters.
std::vector<Point> walk_scope(const RunConfig& cfg, const DeviceOverhead& overhead) {
  const Dims d = dims_of(cfg);
  const Params p = params_of(cfg, d);
  Part part{};
  Bytes params = 0;
  Ledger block;
  switch (cfg.scope) {
    case Scope::layer:
      params = p.block;
      block.add("x_in", kScopeInputs, rows(d, d.H, d.e));
      block.add("dx_out", kScopeInputs, rows(d, d.H, d.e));
      break;
    case Scope::mlp:
      params = p.mlp;
      part = Part{true, false, false, false};
      block.add("norm2.out", kScopeInputs, rows(d, d.H, d.e));
      block.add("dx_out", kScopeInputs, rows(d, d.H, d.e));
      break;
    case Scope::attention:
      part = Part{false, false, true, false};
      block.add("attn.qkv", kScopeInputs, rows(d, d.Q, d.e));
      block.add("d.attn.y", kScopeInputs, rows(d, d.H, d.e));
      break;
    case Scope::model:
      break;
  }
  for (const Ledger::Entry& x : block.entries()) block.pin(x.name);
  const Ledger inputs = block;
  add_part_start(block, d, part);
  // Only the flash attention core runs without a GEMM.
  const bool has_gemms = cfg.scope != Scope::attention || d.eager;
  Walk walk(fixed_state(cfg, overhead, params, has_gemms), d.e);
  Ledger outside;
  const std::string_view where = cfg.scope == Scope::layer ? "layer backward"
                                 : cfg.scope == Scope::mlp ? "mlp backward"
                                                           : "attention backward";
  record_block(walk, d, part, where, -1, outside, {}, std::move(block));
  // Parameter gradients stay to the end of the step; the workspace went with the last op that
  // lists it (the last GEMM, or layer scope's first norm backward).
  walk.grad(params);
  walk.release_workspace();
  walk.at(end_of_step(cfg), inputs);
  return walk.points();
}

// The points that are the peak for some batch B >= 1: the upper envelope of the lines
// fixed + B * per_sample, from B = 1 upwards. The last one has the most bytes per sample.
std::vector<std::size_t> envelope(const std::vector<Point>& points) {
  std::vector<std::size_t> order;
  if (points.empty()) return order;
  // The highest line at B = 1, the steepest among equals.
  std::size_t current = 0;
  for (std::size_t i = 1; i < points.size(); ++i) {
    const Point& a = points[i];
    const Point& b = points[current];
    const Bytes va = a.fixed_total + a.per_sample_total, vb = b.fixed_total + b.per_sample_total;
    if (va > vb || (va == vb && a.per_sample_total > b.per_sample_total)) current = i;
  }
  order.push_back(current);
  double from = 1.0;
  for (;;) {
    // The steeper line that overtakes the current one first.
    std::size_t next = points.size();
    double next_at = std::numeric_limits<double>::infinity();
    for (std::size_t i = 0; i < points.size(); ++i) {
      if (points[i].per_sample_total <= points[current].per_sample_total) continue;
      const double crossing =
          static_cast<double>(points[current].fixed_total - points[i].fixed_total) /
          static_cast<double>(points[i].per_sample_total - points[current].per_sample_total);
      const double at = std::max(crossing, from);
      if (at < next_at || (at == next_at && next < points.size() &&
                           points[i].per_sample_total > points[next].per_sample_total)) {
        next = i;
        next_at = at;
      }
    }
    if (next == points.size()) break;
    order.push_back(next);
    current = next;
    from = next_at;
  }
  return order;
}

// Adds `line` (fixed + batch * per_sample, the allocator's share) to every moment of `out`.
void add_allocator_share(Breakdown& out, Bytes fixed, Bytes per_sample) {
  if (fixed > 0) out.fixed.push_back({kFragmentation, fixed});
  if (per_sample > 0) out.per_sample.push_back({kFragmentation, per_sample});
  for (Moment& m : out.other_moments) {
    m.fixed = checked_add(m.fixed, fixed, "allocator fragmentation");
    m.per_sample = checked_add(m.per_sample, per_sample, "allocator fragmentation");
  }
}

// The largest batch that fits `capacity` when every moment of `out` also holds `share` bytes per
// sample (the allocator's share; out.max_batch() of a copy with the share added).
std::int64_t max_batch_with_share(const Breakdown& out, Bytes capacity, Bytes share) {
  std::int64_t best = std::numeric_limits<std::int64_t>::max();
  auto limit = [&](Bytes fixed, Bytes per_sample) {
    if (capacity < fixed) {
      best = 0;
      return;
    }
    per_sample = checked_add(per_sample, share, "allocator share");
    if (per_sample > 0) best = std::min(best, (capacity - fixed) / per_sample);
  };
  limit(out.fixed_total(), out.per_sample_total());
  for (const Moment& m : out.other_moments) limit(m.fixed, m.per_sample);
  return best;
}

// Where the search below stops looking when the tensors alone would allow more.
constexpr std::int64_t kLargestBatch = std::int64_t{1} << 24;

// The caching allocator's share from a replay of the walk's tensor events: what it reserves beyond
// the tensors' peak, as a line through the two batches where it decides the answer, the largest
// batch whose replay fits `overhead.capacity` and the one after it (without a capacity, or with
// `overhead.share_at_batch`, the configuration's batch and the one after it). There the estimate's
// peak is the replay's; the tensors' own peak bounds the search from above, since the allocator
// never reserves less. `batch_one`: the events at batch 1 where the step's structure differs there,
// else empty.
void fit_allocator_share(Breakdown& out, const TensorEvents& events, const TensorEvents& batch_one,
                         const RunConfig& cfg, const DeviceOverhead& overhead) {
  std::vector<std::pair<std::int64_t, Bytes>> seen;  // batch, replayed device peak
  const Bytes limit = overhead.capacity > overhead.context ? overhead.capacity - overhead.context
                                                           : std::numeric_limits<Bytes>::max();
  auto replayed = [&](std::int64_t batch) {
    for (const auto& [b, peak] : seen)
      if (b == batch) return peak;
    // On the device when it fits there (its cache freed and retried at the limit, as a trial's
    // is); else what it needs, without a limit.
    const TensorEvents& step = batch == 1 && !batch_one.empty() ? batch_one : events;
    const Bytes peak =
        checked_add(replayed_peak(step, batch, limit).reserved, overhead.context, "replayed peak");
    seen.emplace_back(batch, peak);
    return peak;
  };
  std::int64_t at = std::max<std::int64_t>(cfg.batch, 1);
  if (overhead.capacity > 0 && !overhead.share_at_batch) {
    // The largest batch whose replay fits, in a bracket: batch 0 fits, and past the tensors' own
    // largest batch nothing does. Each probe is a guess, the tensors' line plus the share per
    // sample the last replay showed (a failure's is too large, a fit's too small near a cliff,
    // so they close in from both sides), unless the guess leaves the bracket or two probes in a
    // row fell on the same side: then its middle.
    const Bytes capacity = overhead.capacity;
    const std::int64_t most = std::clamp<std::int64_t>(out.max_batch(capacity), 1, kLargestBatch);
    std::int64_t lo = 0, hi = most + 1;
    std::int64_t guess = most;
    int in_a_row = 0;
    bool last_fit = false;
    while (hi - lo > 1) {
      const bool creeping = in_a_row >= 2;
      const std::int64_t b = guess > lo && guess < hi && !creeping ? guess : lo + (hi - lo) / 2;
      const Bytes peak = replayed(b);
      const bool fit = peak <= capacity;
      in_a_row = fit == last_fit && !creeping ? in_a_row + 1 : 1;
      last_fit = fit;
      (fit ? lo : hi) = b;
      guess = max_batch_with_share(out, capacity, std::max<Bytes>(peak - out.peak(b), 0) / b);
      if (fit && guess <= b) guess = b + 1;
    }
    at = std::max<std::int64_t>(lo, 1);
  }
  const Bytes tensors_at = out.peak(at), tensors_next = out.peak(at + 1);
  const Bytes share_at = std::max<Bytes>(replayed(at) - tensors_at, 0);
  const Bytes share_next = std::max<Bytes>(replayed(at + 1) - tensors_next, 0);
  // The line through both; a share that shrinks with the batch is held at its larger value.
  Bytes per_sample = share_next - share_at;
  Bytes fixed = share_at - at * per_sample;
  if (per_sample < 0) {
    per_sample = 0;
    fixed = share_at;
  } else if (fixed < 0) {
    // A cliff: the next batch needs much more than the line from no share at all would give (at
    // the largest batch that fits, the allocator freed its cache and retried; at the next one
    // that no longer helps). The share is the line from the origin to `at`, its slope rounded
    // down and the remainder fixed, so that the peak at `at` is the replay's to the byte (rounded
    // up, a replay that filled the capacity exactly was estimated a few bytes over it, one batch
    // short); a moment of its own, the line through both replays, holds the next batch to what it
    // needs.
    per_sample = share_at / at;
    fixed = share_at - at * per_sample;
    add_allocator_share(out, fixed, per_sample);
    const Bytes steep = replayed(at + 1) - replayed(at);
    out.other_moments.push_back(
        {"allocator: the next batch after its cache is freed", replayed(at) - at * steep, steep});
    return;
  }
  add_allocator_share(out, fixed, per_sample);
}

}  // namespace

Bytes Moment::peak(std::int64_t batch) const {
  return checked_add(fixed, checked_mul(batch, per_sample, "estimated peak"), "estimated peak");
}

Bytes Breakdown::fixed_total() const {
  return sum(fixed);
}
Bytes Breakdown::per_sample_total() const {
  return sum(per_sample);
}

Bytes Breakdown::peak(std::int64_t batch) const {
  Bytes best = Moment{moment, fixed_total(), per_sample_total()}.peak(batch);
  for (const Moment& m : other_moments) best = std::max(best, m.peak(batch));
  return best;
}

std::int64_t Breakdown::max_batch(Bytes capacity) const {
  return max_batch_with_share(*this, capacity, 0);
}

Bytes Breakdown::component(MemoryComponent kind) const {
  for (const auto* list : {&fixed, &per_sample})
    for (const Component& c : *list)
      if (c.kind == kind) return c.bytes;
  return 0;
}

Breakdown analyze(const RunConfig& cfg, const DeviceOverhead& overhead) {
  const bool caching = cfg.allocator == AllocatorKind::caching;
  TensorEvents events;
  std::vector<Point> points = framework_of(cfg) == Framework::hf
                                  ? walk_hf(cfg, overhead, caching ? &events : nullptr)
                              : is_finetune(cfg)              ? walk_finetune(cfg, overhead)
                              : cfg.scope == Scope::model     ? walk_model(cfg, overhead)
                                                              : walk_scope(cfg, overhead);
  const std::vector<std::size_t> order = envelope(points);
  Breakdown out;
  const Point& main = points[order.back()];
  out.moment = main.name();
  out.fixed = components(main.fixed);
  out.per_sample = components(main.per_sample);
  for (std::size_t k = 0; k + 1 < order.size(); ++k) {
    const Point& p = points[order[k]];
    out.other_moments.push_back({p.name(), p.fixed_total, p.per_sample_total});
  }
  // The end of the step holds the whole model state; listed so that it can be read off even when
  // it is never the peak (it cannot raise the peak above the envelope).
  const Point& last = points.back();
  const bool listed = std::any_of(order.begin(), order.end(),
                                  [&](std::size_t i) { return i == points.size() - 1; });
  if (!listed) out.other_moments.push_back({last.name(), last.fixed_total, last.per_sample_total});
  for (const Share& c : last.fixed)
    if (c.component == kWeights || c.component == kMasterWeights || c.component == kGradients ||
        c.component == kOptimizerState || c.component == kQuantized || c.component == kFrozen ||
        c.component == kAdapters || c.component == kAdapterGrads)
      out.model_state = checked_add(out.model_state, c.bytes, "model state");
  // The caching allocator's share, the same at every moment, so that the tensor bytes stay apart:
  // a replay of the step's tensor events (the hf walk records its own; the lean step's follow
  // build.cpp's tensors and ops). Raw cudaMalloc's rounding is in the tensors' own bytes (held()).
  if (caching) {
    const bool hf = framework_of(cfg) == Framework::hf;
    if (!hf) events = lean_events(cfg, overhead.gemm_workspace);
    TensorEvents batch_one;
    if (hf && structure_key(cfg, 1) != structure_key(cfg, 2)) walk_hf(cfg, overhead, &batch_one, 1);
    fit_allocator_share(out, events, batch_one, cfg, overhead);
  }
  return out;
}

}  // namespace vrambench
