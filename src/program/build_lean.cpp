// Builds the lean step program, what a hand-written trainer in the manner of llm.c allocates for
// one training step: forward, loss, backward (recomputes inserted where the recompute mode
// asks) and the optimizer, for the gpt and llama blocks and the four scopes.
//
// Layout (the estimate and the kernels are written against it):
//   model:  embedding [+ dropout] -> L blocks -> final norm -> lm head -> cross entropy,
//           then backward in reverse, then one optimizer op per weight.
//   gpt block:   ln1 -> qkv -> attention -> proj [-> dropout] -> +x_in = x_mid
//                ln2 -> fc -> gelu -> proj [-> dropout] -> +x_mid = x_out
//   llama block: attn_norm -> qkv [-> qk_norm] -> rope -> attention -> o [-> dropout]
//                [-> post_attn_norm] -> +x_in = x_mid
//                mlp_norm -> gate, up -> swiglu -> down [-> dropout] [-> post_mlp_norm]
//                -> +x_mid = x_out
//   (the bracketed norms are Qwen3's and Gemma's: ModelConfig's qk_norm and sandwich_norms;
//   Phi-3's fused linears make gate and up one gate|up linear, which swiglu reads packed)
// In 16-bit with dropout and eager attention a gpt block saves Korthikanti's 34sbh + 5as^2b bytes
// (plus the fp32 norm statistics). Tensors are named "layer3.attn.probs", "layer3.mlp.fc.w",
// "layer3.mlp.fc.w.grad", "wte.m"; a recomputed tensor adds ".recompute"; a gradient adds ".grad".
#include <fmt/format.h>

#include <cstdint>
#include <utility>
#include <vector>

#include "core/error.h"
#include "program/build_common.h"
#include "program/lean_linears.h"
#include "program/program.h"
#include "program/shard.h"
#include "program/signature.h"

namespace vrambench {
namespace build_lean {
namespace {

using build_common::stats_component;

// Which tensors of a block need a gradient (fine-tuning: only what lies above an adapter).
struct BlockGrad {
  bool x_in = true, qkv = true, proj = true, x_mid = true, fc = true, up = true, mlp_in = true,
       out = true, x_out = true;
};

// The attention core's tensors; -1 where the attention kind has none.
struct Core {
  int scores = -1, probs = -1, probs_drop = -1, probs_mask = -1;  // eager
  int capped = -1;  // eager with soft-capping: the capped scores the softmax reads
  int y = -1;
  int lse = -1;  // flash
  int values_input() const { return probs_drop >= 0 ? probs_drop : probs; }
};

struct Mlp {
  int fc_out = -1, gelu_out = -1;                   // gpt
  int gate_out = -1, up_out = -1, swiglu_out = -1;  // llama (fused: gate_out is gate|up)
  int out = -1;                                     // mlp.proj.out / mlp.down.out
  int drop = -1, mask = -1;                         // dropout after the output projection
  LoraSaved fc_saved, up_saved, out_saved;
  // An MoE layer's (moe_fwd): the router's logits, probabilities, weights and experts, the
  // dispatch's rows, order and offsets, the experts' weight operands and outputs.
  int logits = -1, probs = -1, scores = -1, index = -1;
  int xs = -1, order = -1, offsets = -1;
  int w_gate_up = -1, w_down = -1, gate_up = -1, act = -1, ys = -1;
  LoraSaved router_saved;
  int y() const { return drop >= 0 ? drop : out; }
};

// What a block's forward made that its backward reads, and which tensors need a gradient.
struct BlockTensors {
  int layer = 0;
  int x_in = -1;
  int norm1_out = -1, norm1_mean = -1, norm1_rstd = -1;
  int qkv_linear = -1;               // the qkv projection's output (llama: before rope)
  int qk_normed = -1, qk_rstd = -1;  // qk_norm: what rope reads, and the heads' statistics
  int qkv = -1;                      // what attention reads (gpt: qkv_linear; llama: attn.qkv_rot)
  Core core;
  int proj_out = -1, proj_drop = -1, proj_mask = -1;
  int x_mid = -1;
  int norm2_out = -1, norm2_mean = -1, norm2_rstd = -1;
  Mlp mlp;
  // sandwich_norms: each branch's output before its norm, and the norm's statistics and output.
  int attn_branch = -1, post_attn_rstd = -1, post_attn_out = -1;
  int mlp_branch = -1, post_mlp_rstd = -1, post_mlp_out = -1;
  int x_out = -1;
  LoraSaved qkv_saved, proj_saved;
  BlockGrad grad;
};

class LeanBuilder : private LeanLinears {
 public:
  LeanBuilder(const RunConfig& cfg, Bytes gemm_workspace) : LeanLinears(cfg, gemm_workspace) {
    eager_ = cfg.attention == Attention::eager;
    dropout_ = cfg.dropout > 0.0;
  }

  Program build() {
    switch (cfg_.scope) {
      case Scope::model:
        build_model();
        break;
      case Scope::layer:
        build_layer();
        break;
      case Scope::attention:
        build_attention();
        break;
      case Scope::mlp:
        build_mlp();
        break;
    }
    add_optimizer();
    return std::move(p_);
  }

 private:
  // ---- tensors (the parameters and linears: LeanLinears) ------------------------------------

  // The activation entering a layer, mlp or attention scope, or the gradient arriving at its
  // output: inputs of the step.
  int scope_input(Name name, const Dims& dims) {
    return tensor(std::move(name), dims, act_, Role::input, MemoryComponent::scope_inputs);
  }

  // ---- passes (forward_pass, recompute_pass, suffixed, saved: ProgramWriter) -------------------

  // Role of the S x S tensors the backward reads (saved for it unless recompute makes them again).
  static Role saved_probs(const Pass& pass) {
    return pass.keep_probs ? saved(pass) : Role::transient;
  }

  // ---- forward ------------------------------------------------------------------------------

  // Norm of x into `out` (and stats); gpt: layernorm with bias, llama: rmsnorm.
  void norm_fwd(const Name& name, int x, const Param& w, const Param& b, const Pass& pass,
                int layer, Role role, int& out, int& mean, int& rstd) {
    out = tensor(suffixed(pass, name + ".out"), bsh(), act_, role);
    if (gpt_) {
      mean = tensor(suffixed(pass, name + ".mean"), {M_}, DType::f32, role,
                    stats_component(pass.recompute));
      rstd = tensor(suffixed(pass, name + ".rstd"), {M_}, DType::f32, role,
                    stats_component(pass.recompute));
      op(OpKind::layernorm_fwd, name, {x, w.w, b.w}, {out, mean, rstd}, layer, pass.recompute);
    } else {
      mean = -1;
      rstd = tensor(suffixed(pass, name + ".rstd"), {M_}, DType::f32, role,
                    stats_component(pass.recompute));
      rms_attrs(op(OpKind::rmsnorm_fwd, name, {x, w.w}, {out, rstd}, layer, pass.recompute));
    }
  }

  // A sandwich norm of a branch's output x (Gemma 2 and 3), before the residual add: x is kept
  // for the norm's backward, the normed output is the add's alone. Returns the output.
  int post_norm_fwd(const Name& name, int x, const Param& w, const Pass& pass, int layer,
                    int& rstd) {
    keep_for_backward(x, pass);
    const int out = tensor(suffixed(pass, name + ".out"), bsh(), act_, Role::transient);
    rstd = tensor(suffixed(pass, name + ".rstd"), {M_}, DType::f32, saved(pass),
                  stats_component(pass.recompute));
    rms_attrs(op(OpKind::rmsnorm_fwd, name, {x, w.w}, {out, rstd}, layer, pass.recompute));
    return out;
  }

  // scores -> softmax -> [dropout]: the part selective recompute runs again.
  void probs_fwd(const Name& pre, int layer, int qkv, const Pass& pass, Core& core) {
    const Role role = saved_probs(pass);
    core.scores = tensor(suffixed(pass, pre + "attn.scores"), bass(), act_, Role::transient);
    attention_attrs(gemm(OpKind::attn_scores, pre + "attn.scores", {qkv}, {core.scores}, layer,
                         pass.recompute));
    int softmax_in = core.scores;
    if (const double cap = cfg_.model.attn_softcap; cap > 0.0) {
      // Soft-capping: the capped scores are what the softmax reads and the cap's backward.
      core.capped = tensor(suffixed(pass, pre + "attn.scores_capped"), bass(), act_, role);
      softcap_op(pre + "attn.softcap", core.scores, core.capped, layer, cap, pass.recompute);
      softmax_in = core.capped;
    }
    core.probs = tensor(suffixed(pass, pre + "attn.probs"), bass(), act_, role);
    op(OpKind::softmax_fwd, pre + "attn.softmax", {softmax_in}, {core.probs}, layer,
       pass.recompute);
    if (dropout_) {
      core.probs_drop = tensor(suffixed(pass, pre + "attn.probs_drop"), bass(), act_, role);
      core.probs_mask = tensor(suffixed(pass, pre + "attn.probs_mask"), bass(), DType::u8, role);
      dropout_attrs(op(OpKind::dropout_fwd, pre + "attn.probs_dropout", {core.probs},
                       {core.probs_drop, core.probs_mask}, layer, pass.recompute),
                    layer, DropoutSite::attn_probs);
    }
  }

  Core attention_fwd(const Name& pre, int layer, int qkv, const Pass& pass) {
    Core core;
    core.y = tensor(suffixed(pass, pre + "attn.y"), bs_ad(), act_, saved(pass));
    if (eager_) {
      probs_fwd(pre, layer, qkv, pass, core);
      attention_attrs(gemm(OpKind::attn_values, pre + "attn.values", {core.values_input(), qkv},
                           {core.y}, layer, pass.recompute));
    } else {
      core.lse = tensor(suffixed(pass, pre + "attn.lse"), {B_, A_, S_}, DType::f32, saved(pass));
      // The engine's own scratch, live for the op alone (see flash_fwd_scratch_bytes).
      const int scratch = tensor(suffixed(pass, pre + "attn.flash.scratch"),
                                 {flash_fwd_scratch_bytes()}, DType::u8, Role::workspace);
      flash_attrs(op(OpKind::flash_fwd, pre + "attn.flash", {qkv}, {core.y, core.lse, scratch},
                     layer, pass.recompute),
                  layer);
    }
    return core;
  }

  // The MLP from its input x (ln2.out / mlp_norm.out) to its output before the residual add.
  Mlp mlp_fwd(const Name& pre, int layer, int x, const BlockWeights& w, const Pass& pass) {
    Mlp mlp;
    const Role role = saved(pass);
    if (w.moe()) {
      moe_fwd(pre, layer, x, w, pass, mlp);
    } else if (gpt_) {
      mlp.fc_out = tensor(suffixed(pass, w.fc.name + ".out"), bsf(), act_, role);
      mlp.fc_saved = linear_fwd(w.fc, x, mlp.fc_out, layer, pass);
      mlp.gelu_out = tensor(suffixed(pass, pre + "mlp.gelu.out"), bsf(), act_, role);
      op(OpKind::gelu_fwd, pre + "mlp.gelu", {mlp.fc_out}, {mlp.gelu_out}, layer, pass.recompute);
      mlp.out = tensor(suffixed(pass, w.out.name + ".out"), bsh(), act_, Role::transient);
      mlp.out_saved = linear_fwd(w.out, mlp.gelu_out, mlp.out, layer, pass);
    } else {
      const bool fused = cfg_.model.fused_linears;
      mlp.gate_out = tensor(suffixed(pass, w.fc.name + ".out"),
                            fused ? Dims{B_, S_, 2 * F_} : bsf(), act_, role);
      mlp.fc_saved = linear_fwd(w.fc, x, mlp.gate_out, layer, pass);
      TensorIds in{mlp.gate_out};
      if (!fused) {
        mlp.up_out = tensor(suffixed(pass, w.up.name + ".out"), bsf(), act_, role);
        mlp.up_saved = linear_fwd(w.up, x, mlp.up_out, layer, pass);
        in.push_back(mlp.up_out);
      }
      mlp.swiglu_out = tensor(suffixed(pass, pre + "mlp.swiglu.out"), bsf(), act_, role);
      gate_attrs(op(OpKind::swiglu_fwd, pre + "mlp.swiglu", std::move(in), {mlp.swiglu_out}, layer,
                    pass.recompute));
      mlp.out = tensor(suffixed(pass, w.out.name + ".out"), bsh(), act_, Role::transient);
      mlp.out_saved = linear_fwd(w.out, mlp.swiglu_out, mlp.out, layer, pass);
    }
    if (dropout_)
      mlp.drop = dropout_fwd(mlp_site(w), mlp.out, layer, DropoutSite::mlp_proj, pass, DType::u8,
                             mlp.mask);
    return mlp;
  }

  // What the MLP's output dropout is named after: its output projection (an MoE layer's experts'
  // down).
  static const Name& mlp_site(const BlockWeights& w) { return w.moe() ? w.down.name : w.out.name; }

  // An MoE layer's MLP (docs/moe.md) in one dtype, keeping what its backward reads: the router's
  // fp32 probabilities, weights and experts, the dispatch's rows, order and offsets (tokens x
  // top-k rows whatever the routing), gate|up's output and the SwiGLU product, down's output.
  void moe_fwd(const Name& pre, int layer, int x, const BlockWeights& w, const Pass& pass,
               Mlp& mlp) {
    const ModelConfig& m = cfg_.model;
    const Role role = saved(pass);
    const Dim P(routed_rows(m, M_.size), routed_rows(m, M_.per_sample));
    const std::int64_t E = m.experts, K = m.experts_per_token, I = m.expert_ffn;
    auto named = [&](const char* what) { return suffixed(pass, pre + "mlp." + what); };
    mlp.logits = tensor(named("router.logits"), {M_, E}, act_, Role::transient);
    mlp.router_saved = linear_fwd(w.router, x, mlp.logits, layer, pass);
    mlp.probs = tensor(named("router.probs"), {M_, E}, DType::f32, role);
    mlp.scores = tensor(named("router.scores"), {M_, K}, act_, role);
    mlp.index = tensor(named("router.index"), {M_, K}, DType::i64, role);
    Op& router = op(OpKind::router_topk, pre + "mlp.router.topk", {mlp.logits},
                    {mlp.probs, mlp.scores, mlp.index}, layer, pass.recompute);
    router.routing = cfg_.routing;
    router.norm_topk = m.norm_topk;
    mlp.xs = tensor(named("experts.rows"), {P, H_}, act_, role);
    mlp.order = tensor(named("experts.order"), {P}, DType::i64, role);
    mlp.offsets = tensor(named("experts.offsets"), {E}, DType::i32, role);
    op(OpKind::moe_dispatch, pre + "mlp.experts.dispatch", {x, mlp.index},
       {mlp.xs, mlp.order, mlp.offsets}, layer, pass.recompute);
    // The adapters are in the weights' dtype here: nothing to cast.
    TensorIds no_casts;
    mlp.w_gate_up = experts_weight(w.gate_up, pass, true, layer, lora_scale_, no_casts);
    mlp.gate_up = tensor(named("experts.gate_up.out"), {P, 2 * I}, act_, role);
    gemm(OpKind::grouped_linear_fwd, pre + "mlp.experts.gate_up",
         {mlp.xs, mlp.w_gate_up, mlp.offsets}, {mlp.gate_up}, layer, pass.recompute);
    mlp.act = tensor(named("experts.act"), {P, I}, act_, role);
    gate_attrs(op(OpKind::swiglu_fwd, pre + "mlp.experts.swiglu", {mlp.gate_up}, {mlp.act}, layer,
                  pass.recompute));
    mlp.w_down = experts_weight(w.down, pass, true, layer, lora_scale_, no_casts);
    mlp.ys = tensor(named("experts.down.out"), {P, H_}, act_, role);
    gemm(OpKind::grouped_linear_fwd, pre + "mlp.experts.down", {mlp.act, mlp.w_down, mlp.offsets},
         {mlp.ys}, layer, pass.recompute);
    mlp.out = tensor(suffixed(pass, w.down.name + ".combined"), bsh(), act_, Role::transient);
    // The kernel's inverse of the order.
    op(OpKind::moe_combine, pre + "mlp.experts.combine", {mlp.ys, mlp.scores, mlp.order}, {mlp.out},
       layer, pass.recompute)
        .held.push_back(tensor(named("experts.inverse"), {P}, DType::i64, Role::transient));
  }

  // An MoE layer's MLP backward from the gradient of its output: the gradient of its input x, or
  // -1 where x needs none.
  int moe_bwd(const Name& pre, int layer, int x, const Mlp& mlp, const BlockWeights& w, int dy,
              const BlockGrad& g) {
    const Dim P(routed_rows(cfg_.model, M_.size), routed_rows(cfg_.model, M_.per_sample));
    const int dys = grad_of(mlp.ys), dscores = grad_of(mlp.scores);
    op(OpKind::moe_combine_bwd, pre + "mlp.experts.combine.bwd",
       {dy, mlp.ys, mlp.scores, mlp.order}, {dys, dscores}, layer);
    const int dact = grad_of(mlp.act);
    experts_bwd(w.down, mlp.w_down, {}, dys, mlp.offsets, mlp.act, dact, layer, lora_scale_);
    const int dgate_up = grad_of(mlp.gate_up);
    gate_attrs(op(OpKind::swiglu_bwd, pre + "mlp.experts.swiglu.bwd", {dact, mlp.gate_up},
                  {dgate_up}, layer));
    const int dxs = grad_of(mlp.xs);
    experts_bwd(w.gate_up, mlp.w_gate_up, {}, dgate_up, mlp.offsets, mlp.xs, dxs, layer,
                lora_scale_);
    const int dlogits = grad_of(mlp.logits);
    Op& router = op(OpKind::router_topk_bwd, pre + "mlp.router.topk.bwd",
                    {dscores, mlp.probs, mlp.index}, {dlogits}, layer);
    router.routing = cfg_.routing;
    router.norm_topk = cfg_.model.norm_topk;
    const int dx_router = g.mlp_in ? grad_named(w.router.name + ".in.grad", x) : -1;
    linear_bwd(w.router, mlp.router_saved, dlogits, x, dx_router, layer);
    if (!g.mlp_in) return -1;
    const int dx_experts = grad_named(pre + "mlp.experts.in.grad", x);
    op(OpKind::moe_dispatch_bwd, pre + "mlp.experts.dispatch.bwd", {dxs, mlp.order}, {dx_experts},
       layer)
        .held.push_back(tensor(pre + "mlp.experts.inverse.bwd", {P}, DType::i64, Role::transient));
    const int dx = grad_of(x);
    op(OpKind::add, pre + "mlp.grad_sum.bwd", {dx_experts, dx_router}, {dx}, layer);
    return dx;
  }

  BlockTensors block_fwd(int l, int x_in, const BlockWeights& w, const Pass& pass) {
    const Name pre = block_prefix(l);
    const Role role = saved(pass);
    BlockTensors b;
    b.layer = l;
    b.x_in = x_in;
    // Under fine-tuning the embedding is frozen: the first block's input needs no gradient, every
    // later one does (each block has adapters: validate() requires a targeted module).
    b.grad = block_grad(w, !finetune_ || l > 0);
    norm_fwd(w.norm1.name, x_in, w.norm1.w, w.norm1.b, pass, l, role, b.norm1_out, b.norm1_mean,
             b.norm1_rstd);
    if (gpt_) {
      b.qkv_linear = tensor(suffixed(pass, pre + "attn.qkv"), {B_, S_, Q_}, act_, role);
      b.qkv_saved = linear_fwd(w.qkv, b.norm1_out, b.qkv_linear, l, pass);
      b.qkv = b.qkv_linear;
    } else {
      // Rope reads the projection once; only the rotated copy is kept for backward. The q/k
      // norm between them keeps the projection, and its statistics, for its own backward.
      b.qkv_linear = tensor(suffixed(pass, pre + "attn.qkv"), {B_, S_, Q_}, act_,
                            cfg_.model.qk_norm ? role : Role::transient);
      b.qkv_saved = linear_fwd(w.qkv, b.norm1_out, b.qkv_linear, l, pass);
      int rope_in = b.qkv_linear;
      if (cfg_.model.qk_norm) {
        b.qk_normed =
            tensor(suffixed(pass, pre + "attn.qk_norm.out"), {B_, S_, Q_}, act_, Role::transient);
        b.qk_rstd = tensor(suffixed(pass, pre + "attn.qk_norm.rstd"), {B_, S_, qk_norm_rows()},
                           DType::f32, role, stats_component(pass.recompute));
        qk_norm_op(pre + "attn.qk_norm", b.qkv_linear, w.q_norm.w, w.k_norm.w, b.qk_normed,
                   b.qk_rstd, l, pass.recompute);
        rope_in = b.qk_normed;
      }
      b.qkv = tensor(suffixed(pass, pre + "attn.qkv_rot"), {B_, S_, Q_}, act_, role);
      attention_attrs(
          op(OpKind::rope_fwd, pre + "attn.rope", {rope_in}, {b.qkv}, l, pass.recompute));
    }
    b.core = attention_fwd(pre, l, b.qkv, pass);

    const Name& proj = w.proj.name;
    b.proj_out = tensor(suffixed(pass, proj + ".out"), bsh(), act_, Role::transient);
    b.proj_saved = linear_fwd(w.proj, b.core.y, b.proj_out, l, pass);
    int residual = b.proj_out;
    if (dropout_)
      residual = b.proj_drop =
          dropout_fwd(proj, b.proj_out, l, DropoutSite::attn_proj, pass, DType::u8, b.proj_mask);
    if (cfg_.model.sandwich_norms) {
      b.attn_branch = residual;
      residual = b.post_attn_out = post_norm_fwd(w.post_attn_norm.name, residual,
                                                 w.post_attn_norm.w, pass, l, b.post_attn_rstd);
    }
    b.x_mid = tensor(suffixed(pass, pre + "x_mid"), bsh(), act_, role);
    op(OpKind::add, pre + "attn.residual", {x_in, residual}, {b.x_mid}, l, pass.recompute);

    norm_fwd(w.norm2.name, b.x_mid, w.norm2.w, w.norm2.b, pass, l, role, b.norm2_out, b.norm2_mean,
             b.norm2_rstd);
    b.mlp = mlp_fwd(pre, l, b.norm2_out, w, pass);
    int mlp_y = b.mlp.y();
    if (cfg_.model.sandwich_norms) {
      b.mlp_branch = mlp_y;
      mlp_y = b.post_mlp_out =
          post_norm_fwd(w.post_mlp_norm.name, mlp_y, w.post_mlp_norm.w, pass, l, b.post_mlp_rstd);
    }
    // The block output is the next block's input: saved even under full recompute.
    b.x_out = tensor(suffixed(pass, pre + "x_out"), bsh(), act_,
                     pass.recompute ? Role::transient : Role::activation);
    op(OpKind::add, pre + "mlp.residual", {b.x_mid, mlp_y}, {b.x_out}, l, pass.recompute);
    return b;
  }

  // ---- backward -----------------------------------------------------------------------------

  // Gradient of the attention input (qkv, or llama's qkv_rot) from the gradient of attn.y.
  int attention_bwd(const Name& pre, int layer, int qkv, Core core, int dy) {
    const int dqkv = grad_of(qkv);
    if (!eager_) {
      // The fused backward's scratch: what cuDNN asks for (see flash_bwd_scratch_bytes): an fp32
      // dq accumulator [B, A, S, D] and softmax row sums [B, A, S] first, which is all the plain
      // kernels use, then dK and dV per query head with grouped-query heads, and small change.
      const int scratch = tensor(pre + "attn.flash_bwd.scratch",
                                 {build_common::flash_bwd_scratch(B_, S_, A_, K_, D_, act_)},
                                 DType::u8, Role::workspace);
      flash_attrs(op(OpKind::flash_bwd, pre + "attn.flash.bwd", {dy, qkv, core.y, core.lse},
                     {dqkv, scratch}, layer),
                  layer);
      return dqkv;
    }
    // Selective recompute: the S x S tensors were dropped in the forward; regenerate them right
    // before they are needed (under full recompute they already come from the block's recompute).
    if (cfg_.recompute == Recompute::selective) probs_fwd(pre, layer, qkv, recompute_pass(), core);

    const int values_in = core.values_input();
    const int dvalues_in = grad_of(values_in);
    attention_attrs(gemm(OpKind::attn_values_bwd, pre + "attn.values.bwd", {dy, values_in, qkv},
                         {dvalues_in, dqkv}, layer));
    int dprobs = dvalues_in;
    if (dropout_)
      dprobs = dropout_bwd(pre + "attn.probs", dvalues_in, core.probs_mask, core.probs, layer,
                           DropoutSite::attn_probs);
    const int dscores = grad_of(core.scores);
    softmax_bwd(pre, dprobs, core.probs, core.capped, dscores, layer);
    // The q and k parts of dqkv are written in place, next to the v part attn_values_bwd wrote.
    attention_attrs(gemm(OpKind::attn_scores_bwd, pre + "attn.scores.bwd", {dscores, qkv, dqkv},
                         {dqkv}, layer));
    return dqkv;
  }

  // Gradient of the MLP input x from the gradient of the MLP output, -1 when x needs none
  // (fine-tuning below the first adapter); `g` says which tensors need a gradient.
  int mlp_bwd(const Name& pre, int layer, int x, const Mlp& mlp, const BlockWeights& w, int dy,
              const BlockGrad& g) {
    int dout = dy;
    if (dropout_)
      dout = dropout_bwd(mlp_site(w), dy, mlp.mask, mlp.out, layer, DropoutSite::mlp_proj);
    if (w.moe()) return moe_bwd(pre, layer, x, mlp, w, dout, g);
    if (gpt_) {
      const int dgelu = g.fc ? grad_of(mlp.gelu_out) : -1;
      linear_bwd(w.out, mlp.out_saved, dout, mlp.gelu_out, dgelu, layer);
      if (!g.fc) return -1;
      const int dfc = grad_of(mlp.fc_out);
      op(OpKind::gelu_bwd, pre + "mlp.gelu.bwd", {dgelu, mlp.fc_out}, {dfc}, layer);
      return linear_bwd(w.fc, mlp.fc_saved, dfc, x, g.mlp_in ? grad_of(x) : -1, layer);
    }
    const bool swiglu = g.fc || g.up;
    const int dswiglu = swiglu ? grad_of(mlp.swiglu_out) : -1;
    linear_bwd(w.out, mlp.out_saved, dout, mlp.swiglu_out, dswiglu, layer);
    if (!swiglu) return -1;
    if (cfg_.model.fused_linears) {
      const int dgate_up = grad_of(mlp.gate_out);
      gate_attrs(op(OpKind::swiglu_bwd, pre + "mlp.swiglu.bwd", {dswiglu, mlp.gate_out}, {dgate_up},
                    layer));
      return linear_bwd(w.fc, mlp.fc_saved, dgate_up, x, g.mlp_in ? grad_of(x) : -1, layer);
    }
    const int dgate = grad_of(mlp.gate_out);
    const int dup = grad_of(mlp.up_out);
    gate_attrs(op(OpKind::swiglu_bwd, pre + "mlp.swiglu.bwd", {dswiglu, mlp.gate_out, mlp.up_out},
                  {dgate, dup}, layer));
    // x feeds two projections: autograd sums their input gradients.
    int dx_up = g.mlp_in ? grad_named(w.up.name + ".in.grad", x) : -1;
    if (g.up) dx_up = linear_bwd(w.up, mlp.up_saved, dup, x, dx_up, layer);
    int dx_gate = g.mlp_in ? grad_named(w.fc.name + ".in.grad", x) : -1;
    if (g.fc) dx_gate = linear_bwd(w.fc, mlp.fc_saved, dgate, x, dx_gate, layer);
    if (!g.mlp_in) return -1;
    const int dx = grad_of(x);
    op(OpKind::add, pre + "mlp.grad_sum.bwd", {dx_gate, dx_up}, {dx}, layer);
    return dx;
  }

  // Norm backward into `dx` (the norm's share of its input's gradient).
  void norm_bwd(const Name& name, int dy, int x, const Param& w, const Param& b, int mean, int rstd,
                int dx, int layer) {
    TensorIds grads{dx};
    push_grad_if(grads, w);
    push_grad_if(grads, b);
    if (gpt_)
      row_sum(OpKind::layernorm_bwd, name + ".bwd", {dy, x, w.w, mean, rstd}, std::move(grads),
              layer);
    else
      rms_attrs(
          row_sum(OpKind::rmsnorm_bwd, name + ".bwd", {dy, x, w.w, rstd}, std::move(grads), layer));
  }

  // Gradient of the block input from the gradient of its output; -1 when the input needs none.
  int block_bwd(const BlockTensors& b, const BlockWeights& w, int dx_out) {
    const int l = b.layer;
    const BlockGrad& g = b.grad;
    const Name pre = block_prefix(l);
    const Name& norm1 = w.norm1.name;
    const Name& norm2 = w.norm2.name;

    int dmlp_y = dx_out;
    if (b.mlp_branch >= 0 && g.out) {
      dmlp_y = grad_of(b.mlp_branch);
      norm_bwd(w.post_mlp_norm.name, dx_out, b.mlp_branch, w.post_mlp_norm.w, Param{}, -1,
               b.post_mlp_rstd, dmlp_y, l);
    }
    const int dnorm2_out = mlp_bwd(pre, l, b.norm2_out, b.mlp, w, dmlp_y, g);
    if (!g.x_mid) return -1;
    const int dnorm2_in = grad_named(norm2 + ".in.grad", b.x_mid);
    norm_bwd(norm2, dnorm2_out, b.x_mid, w.norm2.w, w.norm2.b, b.norm2_mean, b.norm2_rstd,
             dnorm2_in, l);
    const int dx_mid = grad_of(b.x_mid);
    op(OpKind::add, pre + "mlp.residual.bwd", {dx_out, dnorm2_in}, {dx_mid}, l);

    const Name& proj = w.proj.name;
    int dproj = dx_mid;
    if (b.attn_branch >= 0) {
      dproj = grad_of(b.attn_branch);
      norm_bwd(w.post_attn_norm.name, dx_mid, b.attn_branch, w.post_attn_norm.w, Param{}, -1,
               b.post_attn_rstd, dproj, l);
    }
    if (dropout_)
      dproj = dropout_bwd(proj, dproj, b.proj_mask, b.proj_out, l, DropoutSite::attn_proj);
    const int dy = g.qkv ? grad_of(b.core.y) : -1;
    linear_bwd(w.proj, b.proj_saved, dproj, b.core.y, dy, l);
    if (!g.qkv) return g.x_in ? dx_mid : -1;

    int dqkv = attention_bwd(pre, l, b.qkv, b.core, dy);
    if (!gpt_) {
      const int rope_in = b.qk_normed >= 0 ? b.qk_normed : b.qkv_linear;
      const int drope_in = grad_of(rope_in);
      attention_attrs(op(OpKind::rope_bwd, pre + "attn.rope.bwd", {dqkv}, {drope_in}, l));
      dqkv = drope_in;
      if (b.qk_normed >= 0) {
        const int dqkv_linear = grad_of(b.qkv_linear);
        qk_norm_bwd_op(pre + "attn.qk_norm.bwd", dqkv, b.qkv_linear, w.q_norm.w, w.k_norm.w,
                       b.qk_rstd, dqkv_linear, l);
        dqkv = dqkv_linear;
      }
    }
    const int dnorm1_out =
        linear_bwd(w.qkv, b.qkv_saved, dqkv, b.norm1_out, g.x_in ? grad_of(b.norm1_out) : -1, l);
    if (!g.x_in) return -1;
    const int dnorm1_in = grad_named(norm1 + ".in.grad", b.x_in);
    norm_bwd(norm1, dnorm1_out, b.x_in, w.norm1.w, w.norm1.b, b.norm1_mean, b.norm1_rstd, dnorm1_in,
             l);
    const int dx_in = grad_of(b.x_in);
    op(OpKind::add, pre + "attn.residual.bwd", {dx_mid, dnorm1_in}, {dx_in}, l);
    return dx_in;
  }

  // Which tensors of block `l` need a gradient, given whether its input does: every one under
  // full training; under fine-tuning those downstream of an adapter.
  BlockGrad block_grad(const BlockWeights& w, bool x_in) const {
    BlockGrad g;
    if (!finetune_) return g;
    g.x_in = x_in;
    g.qkv = x_in || !w.qkv.lora.empty();
    g.proj = g.qkv || !w.proj.lora.empty();
    g.x_mid = x_in || g.proj;
    g.mlp_in = g.x_mid;
    g.fc = g.x_mid || !w.fc.lora.empty();
    g.up = gpt_ || cfg_.model.fused_linears ? false : g.x_mid || !w.up.lora.empty();
    g.out = g.fc || g.up || !w.out.lora.empty();
    if (w.moe()) g.out = g.x_mid || !w.gate_up.lora.empty() || !w.down.lora.empty();
    g.x_out = g.x_mid || g.out;
    return g;
  }

  // ---- scopes -------------------------------------------------------------------------------

  void build_model() {
    const ModelConfig& m = cfg_.model;
    // The loss's gradient and the optimizer's division agree on one scale.
    loss_scale_ = step_loss_scale(cfg_);
    const int tokens = tensor("tokens", {B_, S_}, DType::i32, Role::input);
    const int targets = tensor("targets", {B_, S_}, DType::i32, Role::input);

    // The parameters as the weights description lists them; fine-tuning freezes the embeddings,
    // the norms and the lm head (never quantised).
    const bool train = !finetune_;
    auto param = [&](const Name& name, Shape shape) { return weight(name, shape, -1, train); };
    const ModelWeights description = model_weights(m, S_);
    ModelParams params;
    auto block_of = [&](int l) { return block_weights(description.layer(l), l); };
    const std::vector<BlockWeights> weights =
        build_common::lay_out_model(description, m.layers, params, param, block_of);
    const Param& wte = params.wte;
    const Param& wpe = params.wpe;
    const Norm& final_norm = params.final_norm;
    const Param& lm = params.lm_head;

    // Forward.
    const int x0 = tensor("x0", bsh(), act_, Role::activation);
    int embed_out = x0, embed_mask = -1;
    if (dropout_) {
      embed_out = tensor("embed.out", bsh(), act_, Role::transient);
      embed_mask = tensor("embed.mask", bsh(), DType::u8, Role::activation,
                          MemoryComponent::embedding_dropout_mask);
    }
    TensorIds embed_in{tokens, wte.w};
    push_if(embed_in, wpe);
    embed_attrs(op(OpKind::embedding_fwd, "embed", std::move(embed_in), {embed_out}, -1));
    if (dropout_)
      dropout_attrs(op(OpKind::dropout_fwd, "embed.dropout", {embed_out}, {x0, embed_mask}, -1), -1,
                    DropoutSite::embedding);

    const Pass pass = forward_pass();
    std::vector<BlockTensors> blocks;
    int x = x0;
    for (int l = 0; l < static_cast<int>(m.layers); ++l) {
      blocks.push_back(block_fwd(l, x, weights[static_cast<std::size_t>(l)], pass));
      x = blocks.back().x_out;
    }

    int final_out = -1, final_mean = -1, final_rstd = -1;
    norm_fwd(final_norm.name, x, final_norm.w, final_norm.b, Pass{}, -1, Role::activation,
             final_out, final_mean, final_rstd);
    // Under final soft-capping (Gemma 2) the capped logits are what the loss and the cap's
    // backward read; the lm head's output is the cap's alone.
    const double cap = m.final_softcap;
    const int logits =
        tensor(cap > 0.0 ? "logits.uncapped" : "logits", {M_, V_}, act_,
               cap > 0.0 ? Role::transient : Role::activation, MemoryComponent::logits_and_loss);
    gemm(OpKind::linear_fwd, "lm_head", {final_out, lm.w}, {logits}, -1);
    int ce_in = logits;
    if (cap > 0.0) {
      ce_in = tensor("logits", {M_, V_}, act_, Role::activation, MemoryComponent::logits_and_loss);
      softcap_op("logits.softcap", logits, ce_in, -1, cap);
    }
    const int loss =
        tensor("loss", {1}, DType::f32, Role::transient, MemoryComponent::logits_and_loss);
    const int lse =
        tensor("ce.lse", {M_}, DType::f32, Role::activation, MemoryComponent::logits_and_loss);
    op(OpKind::cross_entropy_fwd, "ce", {ce_in, targets}, {loss, lse}, -1);
    p_.loss_tensor = loss;

    // Backward.
    backward_start_ = static_cast<int>(p_.ops.size());
    const int dce_in = grad_of(ce_in);
    op(OpKind::cross_entropy_bwd, "ce.bwd", {ce_in, targets, lse}, {dce_in}, -1).grad_scale =
        loss_scale_;
    int dlogits = dce_in;
    if (cap > 0.0) {
      dlogits = grad_of(logits);
      softcap_bwd_op("logits.softcap.bwd", dce_in, ce_in, dlogits, -1, cap);
    }
    const int dfinal_out = grad_of(final_out);
    // Tied: the lm head is the first writer of wte.grad; embedding_bwd accumulates into it.
    if (lm.trainable())
      gemm(OpKind::linear_bwd, "lm_head.bwd", {dlogits, final_out, lm.w}, {dfinal_out, lm.grad},
           -1);
    else
      gemm(OpKind::linear_dgrad, "lm_head.dgrad", {dlogits, lm.w}, {dfinal_out}, -1);
    int dx = grad_of(x);
    norm_bwd(final_norm.name, dfinal_out, x, final_norm.w, final_norm.b, final_mean, final_rstd, dx,
             -1);

    for (int l = static_cast<int>(m.layers) - 1; l >= 0; --l) {
      const BlockWeights& w = weights[static_cast<std::size_t>(l)];
      BlockTensors b = blocks[static_cast<std::size_t>(l)];
      if (cfg_.recompute == Recompute::full) b = block_fwd(l, b.x_in, w, recompute_pass());
      dx = block_bwd(b, w, dx);
      if (dx < 0) break;  // nothing below needs a gradient
    }
    if (!wte.trainable()) {
      forward_only_activations_are_transient();
      return;
    }

    int dembed = dx;
    if (dropout_) {
      dembed = grad_of(embed_out);
      dropout_attrs(op(OpKind::dropout_bwd, "embed.dropout.bwd", {dx, embed_mask}, {dembed}, -1),
                    -1, DropoutSite::embedding);
    }
    TensorIds embed_grads{wte.grad};
    push_grad_if(embed_grads, wpe);
    Op& embed_bwd =
        row_sum(OpKind::embedding_bwd, "embed.bwd", {dembed, tokens}, std::move(embed_grads), -1);
    embed_bwd.accumulate = m.tied_embeddings;
    embed_attrs(embed_bwd);
  }

  // Under fine-tuning, an activation that no op of the backward reads was not saved: it is a
  // forward transient (its liveness, from the op order, already ends in the forward).
  void forward_only_activations_are_transient() {
    std::vector<int> last_use(p_.tensors.size(), -1);  // per tensor: the last op that lists it
    for (int i = 0; i < static_cast<int>(p_.ops.size()); ++i)
      for (const auto* list : {&p_.ops[static_cast<std::size_t>(i)].inputs,
                               &p_.ops[static_cast<std::size_t>(i)].outputs})
        for (int id : *list) last_use[static_cast<std::size_t>(id)] = i;
    for (Tensor& t : p_.tensors)
      if (t.role == Role::activation &&
          last_use[static_cast<std::size_t>(t.id)] < backward_start_) {
        t.role = Role::transient;
        if (t.component == MemoryComponent::saved_activations)
          t.component = MemoryComponent::backward_transient;
      }
  }

  void build_layer() {
    const int x_in = scope_input("layer0.x_in", bsh());
    const BlockWeights w = block_weights(block_modules(cfg_.model), 0);
    BlockTensors b = block_fwd(0, x_in, w, forward_pass());
    const int dout = scope_input("dout", bsh());
    p_.output_grad_tensor = dout;
    if (cfg_.recompute == Recompute::full) b = block_fwd(0, x_in, w, recompute_pass());
    block_bwd(b, w, dout);
  }

  void build_attention() {
    const int qkv = scope_input("layer0.attn.qkv", {B_, S_, Q_});
    Core core = attention_fwd("layer0.", 0, qkv, forward_pass());
    const int dout = scope_input("dout", bsh());
    p_.output_grad_tensor = dout;
    if (cfg_.recompute == Recompute::full)
      core = attention_fwd("layer0.", 0, qkv, recompute_pass());
    attention_bwd("layer0.", 0, qkv, core, dout);
  }

  void build_mlp() {
    const int x = scope_input("layer0.mlp.x", bsh());
    const BlockWeights w = block_weights(block_modules(cfg_.model), 0, true);
    Mlp mlp = mlp_fwd("layer0.", 0, x, w, forward_pass());
    const int dout = scope_input("dout", bsh());
    p_.output_grad_tensor = dout;
    if (cfg_.recompute == Recompute::full) mlp = mlp_fwd("layer0.", 0, x, w, recompute_pass());
    mlp_bwd("layer0.", 0, x, mlp, w, dout, BlockGrad{});
  }

  // ---- optimizer ----------------------------------------------------------------------------

  void add_optimizer() {
    if (cfg_.optimizer == Optimizer::none) return;
    for (const Param& param : params_) {
      TensorIds in{param.w, param.grad};
      OpKind kind = OpKind::adamw_step;
      if (param.m_absmax >= 0) {
        kind = OpKind::adamw8bit_step;
        in.insert(in.end(), {param.m, param.v, param.m_absmax, param.v_absmax});
      } else if (is_adamw(cfg_.optimizer)) {
        in.push_back(param.m);
        in.push_back(param.v);
      } else {
        kind = OpKind::sgd_step;
        in.push_back(param.momentum);
      }
      if (param.master >= 0) in.push_back(param.master);
      op(kind, p_.tensor(param.w).name + ".step", std::move(in), {}, param.layer).grad_scale =
          loss_scale_;
    }
  }

  bool eager_ = false, dropout_ = false;
  int backward_start_ = 0;   // index of the first backward op (model scope)
  float loss_scale_ = 1.0f;  // model scope: static_loss_scale; other scopes have no loss
};

}  // namespace
}  // namespace build_lean

int structure_key(const RunConfig& cfg, std::int64_t batch) {
  if (framework_of(cfg) != Framework::hf) return 0;
  const int view =
      build_common::hf_query_is_a_view(cfg, batch) != build_common::hf_query_is_a_view(cfg, 2) ? 1
                                                                                               : 0;
  // A preference trainer's LM head tile stops growing once full.
  return view + (build_common::logprob_tile_full(cfg, batch) ? 2 : 0);
}

Program build_program(const RunConfig& cfg, Bytes gemm_workspace) {
  if (gemm_workspace < 0)
    throw InternalError(fmt::format("build_program: negative GEMM workspace {}", gemm_workspace));
  if (framework_of(cfg) == Framework::hf) return build_hf_program(cfg, gemm_workspace, HfOptions{});
  Program program = build_lean::LeanBuilder(cfg, gemm_workspace).build();
  shard_for_rank(program);
  for (const Op& op : program.ops) check_op(program, op);
  return program;
}

}  // namespace vrambench
