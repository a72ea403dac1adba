// The hf builder's MoE layer MLP: transformers 5's sparse MoE block (MixtralSparseMoeBlock,
// Qwen3MoeSparseMoeBlock, OlmoeSparseMoeBlock) with its default experts implementation,
// grouped_mm (integrations/moe.py), forward and backward, with PEFT's LoRA on the experts
// (ParamWrapper) and QLoRA's fp32 experts. docs/moe.md lists what each step keeps.
//
// The router: F.linear into logits [T,E] in the compute dtype; softmax in fp32 (Mixtral casts
// the logits first, the others pass dtype=float), which saves its output; topk (saves the
// indices); the top-k weights divided by their sum in place (Mixtral always, the others with
// norm_topk_prob), cast back to the logits' dtype but by Mixtral. The experts: the pairs sorted by
// expert (a permutation and its expert ids), the rows gathered (x[perm // k], which saves the
// indices), the counts by histc and their running sum (the offsets), one grouped GEMM into
// gate|up [P,2I] (saving its input when the weight trains), SiLU(gate) * up (SiLU saves gate|up,
// the product saves SiLU's output), a grouped GEMM into [P,H], times the pairs' weights (the
// product promoted: fp32 under Mixtral's fp32 weights), unpermuted (inv_perm) and summed over
// each token's k pairs, cast back to the input's dtype.
#include "program/hf_builder.h"

namespace vrambench::build_hf {

void HfBuilder::moe_mlp_fwd(const Name& pre, int l, const BlockWeights& w, const Pass& pass,
                            HfBlockTensors& b) {
  const ModelConfig& m = cfg_.model;
  const std::int64_t E = m.experts, K = m.experts_per_token, I = m.expert_ffn;
  const Dim P(routed_rows(m, M_.size), routed_rows(m, M_.per_sample));
  HfMoeTensors& t = b.moe;
  const int x = b.norm2.out;
  const DType xd = dtype_of(x);
  t.in_grad = b.x_mid_grad;
  t.logit_grad = t.in_grad || w.router.trainable();
  t.gate_up_grad = w.gate_up.trainable() || !w.gate_up.lora.empty();
  t.down_grad = w.down.trainable() || !w.down.lora.empty();
  const bool rows_grad = t.in_grad || t.gate_up_grad;  // gate|up's output requires grad
  const Role role = saved(pass);
  auto kept = [&](bool grad) { return grad ? role : Role::transient; };
  auto named = [&](const char* what) { return suffixed(pass, pre + "mlp." + what); };

  // The router.
  if (w.router.trainable()) keep_for_backward(x, pass);
  t.logits = tensor(named("router.logits"), {M_, E}, out_dtype(w.router, x), Role::transient);
  t.router_saved = linear_fwd(w.router, x, t.logits, l, pass, t.in_grad);
  const DType scores_dtype = m.router_scores_f32 ? DType::f32 : dtype_of(t.logits);
  t.probs = tensor(named("router.probs"), {M_, E}, DType::f32, kept(t.logit_grad));
  t.scores = tensor(named("router.scores"), {M_, K}, scores_dtype, Role::transient);
  t.index = tensor(named("router.index"), {M_, K}, DType::i64, kept(t.logit_grad));
  Op& router = op(OpKind::router_topk, pre + "mlp.router.topk", {t.logits},
                  {t.probs, t.scores, t.index}, l, pass.recompute);
  router.routing = cfg_.routing;
  router.norm_topk = m.norm_topk;
  // softmax's fp32 input (Mixtral's .float(), the others' dtype=float), and the division's sum
  // [T,1] and, where the weights are cast back, their fp32 values, both saved by the division.
  router.held.push_back(tensor(named("router.logits.f32"), {M_, E}, DType::f32, Role::transient));
  if (m.norm_topk)
    t.router_held.push_back(
        tensor(named("router.topk.sum"), {M_, 1}, DType::f32, kept(t.logit_grad)));
  if (scores_dtype != DType::f32)
    t.router_held.push_back(tensor(named("router.topk.values"), {M_, K}, DType::f32,
                                   kept(t.logit_grad && m.norm_topk)));
  router.held.insert(router.held.end(), t.router_held.begin(), t.router_held.end());

  // The dispatch: sort's expert ids and permutation, the gather's index (perm // k, `order`), the
  // rows, histc's fp32 input and counts, the offsets (saved by grouped_mm).
  t.xs = tensor(named("experts.rows"), {P, m.hidden}, xd, kept(t.gate_up_grad));
  t.order = tensor(named("experts.order"), {P}, DType::i64, kept(t.in_grad || t.logit_grad));
  t.offsets = tensor(named("experts.offsets"), {E}, DType::i32, kept(rows_grad));
  Op& dispatch = op(OpKind::moe_dispatch, pre + "mlp.experts.dispatch", {x, t.index},
                    {t.xs, t.order, t.offsets}, l, pass.recompute);
  t.pairs_perm = tensor(named("experts.perm"), {P}, DType::i64, kept(t.logit_grad));
  dispatch.held = {tensor(named("experts.sorted_ids"), {P}, DType::i64, Role::transient),
                   t.pairs_perm,
                   tensor(named("experts.histc_in"), {P}, DType::f32, Role::transient),
                   tensor(named("experts.counts"), {E}, DType::f32, Role::transient)};

  // gate|up: grouped_mm reads the rows in the weight's dtype and the weight (LoRA's effective one).
  t.w_gate_up = experts_weight(w.gate_up, pass, t.in_grad, l, lora_scale_, t.gate_up_casts);
  const DType wd = dtype_of(t.w_gate_up);
  t.gemm_in =
      cast(t.xs, wd, pre + "mlp.experts.rows.cast", kept(t.gate_up_grad), l, pass.recompute);
  t.gate_up = tensor(named("experts.gate_up.out"), {P, 2 * I}, wd, kept(rows_grad));
  gemm(OpKind::grouped_linear_fwd, pre + "mlp.experts.gate_up", {t.gemm_in, t.w_gate_up, t.offsets},
       {t.gate_up}, l, pass.recompute);
  // SiLU(gate) * up: SiLU's output saved by the product, the product by a down that trains.
  t.act = tensor(named("experts.act"), {P, I}, wd, kept(t.down_grad));
  Op& act = gate_attrs(
      op(OpKind::swiglu_fwd, pre + "mlp.experts.swiglu", {t.gate_up}, {t.act}, l, pass.recompute));
  t.act_held.push_back(tensor(named("experts.silu.out"), {P, I}, wd, kept(rows_grad)));
  act.held = t.act_held;

  // down, then the weighted combine.
  t.w_down = experts_weight(w.down, pass, rows_grad, l, lora_scale_, t.down_casts);
  t.ys = tensor(named("experts.down.out"), {P, m.hidden}, wd, kept(t.logit_grad));
  gemm(OpKind::grouped_linear_fwd, pre + "mlp.experts.down", {t.act, t.w_down, t.offsets}, {t.ys},
       l, pass.recompute);
  const DType cd = promoted(wd, scores_dtype);
  const bool y_grad = t.logit_grad || rows_grad;
  b.mlp_out = tensor(suffixed(pass, pre + "mlp.down.out"), bsh(), xd, Role::transient);
  Op& combine = op(OpKind::moe_combine, pre + "mlp.experts.combine", {t.ys, t.scores, t.order},
                   {b.mlp_out}, l, pass.recompute);
  // The pairs' weights in sorted order (saved by the product), inv_perm (saved by the index) and
  // the arange it is filled from, the weighted rows and their unpermuted copy, the fp32 sum
  // before its cast back.
  const int inv_perm = tensor(named("experts.inv_perm"), {P}, DType::i64, kept(y_grad));
  t.combine_held = {tensor(named("experts.pair_scores"), {P}, scores_dtype, kept(rows_grad)),
                    inv_perm, t.pairs_perm};
  combine.held = t.combine_held;
  combine.held.push_back(tensor(named("experts.arange"), {P}, DType::i64, Role::transient));
  combine.held.push_back(tensor(named("experts.weighted"), {P, m.hidden}, cd, Role::transient));
  combine.held.push_back(tensor(named("experts.unpermuted"), {P, m.hidden}, cd, Role::transient));
  if (cd != xd)
    combine.held.push_back(tensor(named("experts.sum"), {M_, m.hidden}, cd, Role::transient));
}

int HfBuilder::moe_mlp_bwd(const HfBlockTensors& b, const BlockWeights& w, int dmlp) {
  const int l = b.layer;
  const Name pre = block_prefix(l);
  const ModelConfig& m = cfg_.model;
  const HfMoeTensors& t = b.moe;
  const Dim P(routed_rows(m, M_.size), routed_rows(m, M_.per_sample));
  const DType wd = dtype_of(t.ys);
  const DType cd = promoted(wd, dtype_of(t.scores));

  // The combine's backward: the sum's (cast back), the index's (zeros, then index_put with
  // accumulate: its sorted indices), the product's: d(rows) = d(weighted) x weights in the
  // promoted dtype, cast to the rows', and d(weights) = the row sums of d(weighted) x rows.
  const int dys = grad_of(t.ys);
  const int dscores = grad_of(t.scores);
  Op& combine = op(OpKind::moe_combine_bwd, pre + "mlp.experts.combine.bwd",
                   {dmlp, t.ys, t.scores, t.order}, {dys, dscores}, l);
  combine.held = t.combine_held;
  for (const char* piece : {"experts.weighted.grad", "experts.weighted.grad_x_rows"})
    combine.held.push_back(tensor(pre + "mlp." + piece, {P, m.hidden}, cd, Role::transient));
  if (cd != wd)
    combine.held.push_back(
        tensor(pre + "mlp.experts.down.out.grad.promoted", {P, m.hidden}, cd, Role::transient));
  combine.held.push_back(
      tensor(pre + "mlp.experts.inv_perm.sorted", {P}, DType::i64, Role::transient));

  // down, SiLU(gate) * up, gate|up.
  const int dact = grad_of(t.act);
  experts_bwd(w.down, t.w_down, t.down_casts, dys, t.offsets, t.act, dact, l, lora_scale_);
  const int dgate_up = grad_of(t.gate_up);
  Op& act = gate_attrs(
      op(OpKind::swiglu_bwd, pre + "mlp.experts.swiglu.bwd", {dact, t.gate_up}, {dgate_up}, l));
  act.held = t.act_held;
  act.held.push_back(
      tensor(pre + "mlp.experts.swiglu.bwd.halves", {2, P, m.expert_ffn}, wd, Role::transient));
  int drows = -1;
  if (t.in_grad || !w.gate_up.lora.empty() || w.gate_up.trainable()) {
    drows = grad_of(t.gemm_in);
    experts_bwd(w.gate_up, t.w_gate_up, t.gate_up_casts, dgate_up, t.offsets, t.gemm_in, drows, l,
                lora_scale_);
  }

  // The gather's backward into the rows' token (index_put with accumulate, which sorts the
  // indices: the scratch the kernel inverts the order in), the router's, and their sum.
  if (!t.in_grad) return -1;
  if (t.gemm_in != t.xs) {
    const int d = grad_of(t.xs);
    op(OpKind::cast, pre + "mlp.experts.rows.cast.bwd", {drows}, {d}, l);
    drows = d;
  }
  const int x = b.norm2.out;
  const int dx_experts = grad_named(pre + "mlp.experts.in.grad", x);
  Op& gather = op(OpKind::moe_dispatch_bwd, pre + "mlp.experts.dispatch.bwd", {drows, t.order},
                  {dx_experts}, l);
  gather.held = {tensor(pre + "mlp.experts.order.sorted", {P}, DType::i64, Role::transient),
                 tensor(pre + "mlp.experts.order.positions", {P}, DType::i64, Role::transient)};
  // topk's backward (zeros [T,E] fp32, the picked gradients scattered in), the softmax's in
  // fp32, then the logits' dtype: Mixtral's .float() casts it back.
  const bool f32_first = m.router_scores_f32 && dtype_of(t.logits) != DType::f32;
  const int dlogits_router = f32_first ? tensor(pre + "mlp.router.logits.f32.grad", {M_, m.experts},
                                                DType::f32, Role::transient)
                                       : grad_of(t.logits);
  Op& router = op(OpKind::router_topk_bwd, pre + "mlp.router.topk.bwd", {dscores, t.probs, t.index},
                  {dlogits_router}, l);
  router.routing = cfg_.routing;
  router.norm_topk = m.norm_topk;
  router.held = t.router_held;
  router.held.push_back(
      tensor(pre + "mlp.router.probs.grad", {M_, m.experts}, DType::f32, Role::transient));
  int dlogits = dlogits_router;
  if (f32_first) {
    dlogits = grad_of(t.logits);
    op(OpKind::cast, pre + "mlp.router.logits.f32.grad.cast", {dlogits_router}, {dlogits}, l);
  }
  // The load-balancing loss's share, which waited in autograd's buffer since the backward began.
  if (static_cast<std::size_t>(l) < aux_dlogits_.size() && aux_dlogits_[l] >= 0) {
    const int sum = grad_named(pre + "mlp.router.logits.grad.sum", t.logits);
    op(OpKind::add, pre + "mlp.router.aux.grad_sum", {dlogits, aux_dlogits_[l]}, {sum}, l);
    dlogits = sum;
  }
  const int dx_router = linear_bwd(w.router, t.router_saved, dlogits, l);
  if (dx_router < 0) return dx_experts;
  const int dx = grad_of(x);
  op(OpKind::add, pre + "mlp.grad_sum.bwd", {dx_experts, dx_router}, {dx}, l);
  return dx;
}

// transformers' load_balancing_loss_func over the router logits the model kept of every MoE layer
// (outputs.router_logits), after the loss: per layer softmax (its output saved), top-k, histc of
// the experts (fp32) and the probabilities' fp32 sum, into statistics over the layers; then the
// loss plus router_aux_loss_coef times it. The statistics are chained layer to layer.
void HfBuilder::aux_loss_fwd(const std::vector<HfBlockTensors>& blocks) {
  const ModelConfig& m = cfg_.model;
  const std::int64_t E = m.experts, K = m.experts_per_token;
  aux_probs_.assign(blocks.size(), -1);
  for (const HfBlockTensors& b : blocks) {
    const HfMoeTensors& t = b.moe;
    if (t.logits < 0) continue;
    const Name pre = block_prefix(b.layer) + "mlp.router.aux.";
    const DType dt = dtype_of(t.logits);
    const int probs = tensor(pre + "probs", {M_, E}, dt, Role::activation);
    const int stats = tensor(pre + "stats", {2, E + 1}, DType::f32, Role::transient);
    TensorIds in{t.logits, t.index};
    if (aux_stats_ >= 0) in.push_back(aux_stats_);
    Op& o = op(OpKind::router_aux_stats, pre + "stats", std::move(in), {probs, stats}, -1);
    o.held = {tensor(pre + "topk.values", {M_, K}, dt, Role::transient),
              tensor(pre + "topk.index", {M_, K}, DType::i64, Role::transient),
              tensor(pre + "histc_in", {M_, K}, DType::f32, Role::transient)};
    if (dt != DType::f32)
      o.held.push_back(tensor(pre + "probs.f32", {M_, E}, DType::f32, Role::transient));
    aux_probs_[static_cast<std::size_t>(b.layer)] = probs;
    aux_stats_ = stats;
  }
  const int total =
      tensor("loss.total", {1}, DType::f32, Role::transient, MemoryComponent::logits_and_loss);
  op(OpKind::router_aux_loss, "router.aux.loss", {p_.loss_tensor, aux_stats_}, {total}, -1)
      .aux_coef = static_cast<float>(m.router_aux_coef);
  p_.loss_tensor = total;
}

// Its backward, which autograd runs before the loss's: each layer's gradient of its logits, which
// waits for the layer's backward (where the router's logits require grad).
void HfBuilder::aux_loss_bwd(const std::vector<HfBlockTensors>& blocks) {
  aux_dlogits_.assign(blocks.size(), -1);
  for (const HfBlockTensors& b : blocks) {
    const int probs = aux_probs_[static_cast<std::size_t>(b.layer)];
    if (probs < 0 || !b.moe.logit_grad) continue;
    const int dlogits =
        grad_named(block_prefix(b.layer) + "mlp.router.logits.aux.grad", b.moe.logits);
    Op& o = op(OpKind::router_aux_bwd, block_prefix(b.layer) + "mlp.router.aux.bwd",
               {probs, aux_stats_}, {dlogits}, b.layer);
    o.aux_coef = static_cast<float>(cfg_.model.router_aux_coef);
    o.grad_scale = loss_scale_;
    aux_dlogits_[static_cast<std::size_t>(b.layer)] = dlogits;
  }
}

}  // namespace vrambench::build_hf
