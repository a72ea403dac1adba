// The hf builder's preference trainers (docs/preference.md): the step TRL 1.16's DPOTrainer and
// KTOTrainer run (trl/trainer/dpo_trainer.py and kto_trainer.py, _compute_loss).
//
// DPO: a batch of B pairs is one forward of 2B sequences (chosen, then rejected) through the
// policy with grad, then the same through the reference under no_grad (unless precomputed), the
// loss over the sequences' summed log-probabilities, its backward. KTO: a batch of B examples;
// first the policy under no_grad over the KL sequences (mismatched pairs), then the policy with
// grad, then the reference under no_grad over the KL sequences and the examples.
//
// The reference: a frozen copy of the model in the policy's dtype (an explicit ref_model, TRL's
// default under full fine-tuning), the policy itself with its adapters disabled (PEFT's
// disable_adapter(), the default under PEFT), or log-probabilities computed before training
// (precompute_ref_log_probs: the batch carries them).
//
// Every forward ends in TRL's fused LM head (trl/trainer/utils.py, add_fused_lm_head;
// trl/kernels/chunked_logprob.py): the final norm's output without each row's last position,
// flattened (a copy, except on the CPU for a single row, where it is a view), projected a tile of
// at most 4096 tokens x 32768 vocabulary columns at a time and folded into each token's
// log-sum-exp, so the [M,V] logits are never made. What it saves for its backward is that copy
// (or view), the log-sum-exps and the entropies; its backward recomputes each tile, turns it into
// the logits' gradient in place and accumulates the input's (and a trainable head's) gradient in
// fp32. On a GPU the fold is a Triton kernel; on the CPU it is torch ops over the whole tile,
// whose fp32 temporaries the reference measures (kCpuTiles*).
#include <fmt/format.h>

#include <algorithm>
#include <cstdint>
#include <string_view>
#include <vector>

#include "program/hf_builder.h"

namespace vrambench::build_hf {
namespace {

constexpr MemoryComponent kLoss = MemoryComponent::logits_and_loss;
// The fp32 [T,C] tiles the CPU's torch fold keeps at once (its tile.float(), exp(z - max) and
// their products; the backward's y, z, log_p, p, the gradient and two temporaries of its sum,
// beside the bool tile of which column is the target).
constexpr int kCpuTilesFwd = 3;
constexpr int kCpuTilesBwd = 7;
// The per-token fp32 vectors the fused head makes beside its outputs (running max, sums, target
// logits, the entropy's and the mean logit's, their masked copies).
constexpr std::int64_t kPerTokenVectors = 12;

}  // namespace

// The reference's parameters, KTO's KL inputs and the precomputed log-probabilities.
HfPreference HfBuilder::preference_setup(const ModelWeights& description, const ModelParams& params,
                                         const std::vector<BlockWeights>& weights) {
  HfPreference pref;
  const Reference reference = reference_of(cfg_);
  const bool kto = cfg_.trainer == Trainer::kto;
  if (reference == Reference::copy) {
    // A second model built as the policy's base, frozen, without adapters, its weights filed
    // under reference_weights.
    const std::size_t first = p_.tensors.size();
    auto param = [&](const Name& name, Shape shape) {
      return weight("ref." + name, std::move(shape), -1, Train::frozen);
    };
    auto block_of = [&](int l) {
      return build_common::lay_out_block(
          description.layer(l), l, false,
          [&](const Name& name, Shape shape) {
            return weight("ref." + name, std::move(shape), l, Train::frozen);
          },
          [&](const Name& name, const WeightModule& module) {
            return linear("ref." + name, module, l, false);
          });
    };
    pref.ref_weights = build_common::lay_out_model(description, cfg_.model.layers, pref.ref_params,
                                                   param, block_of);
    for (std::size_t t = first; t < p_.tensors.size(); ++t)
      if (p_.tensors[t].role == Role::weight)
        p_.tensors[t].component = MemoryComponent::reference_weights;
  } else {
    pref.ref_params = params;
    for (const BlockWeights& w : weights) pref.ref_weights.push_back(w.without_adapters());
  }
  if (kto) {
    pref.kl_tokens = tensor("kl.tokens", {B_, S_}, DType::i32, Role::input);
    pref.kl_targets = tensor("kl.targets", {B_, S_}, DType::i32, Role::input);
  }
  if (reference == Reference::precomputed) {
    // The batch's columns of reference log-probabilities (a sum per sequence; kept per position
    // here, a few kilobytes on the safe side).
    constexpr MemoryComponent kInputs = MemoryComponent::tokens_and_targets;
    pref.ref = tensor("ref.logps", {B_, S_}, DType::f32, Role::input, kInputs);
    if (kto) pref.ref_kl = tensor("ref.kl.logps", {B_, S_}, DType::f32, Role::input, kInputs);
  }
  return pref;
}

// A forward under torch.no_grad over `tokens` (names ending in `suffix`): nothing it makes
// outlives the op that last reads it. Returns its per-token log-probabilities.
int HfBuilder::no_grad_forward(std::string_view suffix, int tokens, int targets,
                               const ModelParams& params,
                               const std::vector<BlockWeights>& weights) {
  const std::string_view outer = recompute_suffix_;
  recompute_suffix_ = suffix;
  const Pass pass = recompute_pass();
  int x = embeddings_fwd(tokens, params, false, pass).x0;
  for (int l = 0; l < static_cast<int>(weights.size()); ++l)
    x = block_fwd(l, x, weights[static_cast<std::size_t>(l)], pass, false).x_out;
  const int logp = logprob_head_fwd(x, false, params, targets, pass).logp;
  recompute_suffix_ = outer;
  return logp;
}

// What the head's tensors are filed under: the loss's, or in a forward under no_grad the
// reference forward's (by its names' suffix).
std::optional<MemoryComponent> HfBuilder::head_component(const Pass& pass) const {
  return pass.recompute ? std::nullopt : std::optional(kLoss);
}

// The tile's dimensions: at most kLogprobTileTokens of the scored positions (a line in the batch
// until full) by at most kLogprobTileColumns of the vocabulary.
std::pair<Dim, std::int64_t> HfBuilder::logprob_tile() const {
  const Dim T = build_common::logprob_tile_full(cfg_, cfg_.batch)
                    ? Dim(build_common::kLogprobTileTokens)
                    : Dim(B_.size * (S_ - 1), B_.per_sample * (S_ - 1));
  return {T, std::min(V_, build_common::kLogprobTileColumns)};
}

// What the fused head allocates while it runs: the tile in the compute dtype (autocast's, else
// the hidden states'), under autocast the tile's rows of x and w cast to it, and the per-token
// vectors.
TensorIds HfBuilder::logprob_scratch(const Name& name, int hidden, const Pass& pass) {
  const auto [T, C] = logprob_tile();
  const std::optional<MemoryComponent> component = head_component(pass);
  const DType x_dtype = dtype_of(hidden);
  const DType tile_dtype = amp_ ? cdt_ : x_dtype;
  TensorIds held;
  held.push_back(
      tensor(suffixed(pass, name + ".tile"), {T, C}, tile_dtype, Role::transient, component));
  if (tile_dtype != x_dtype) {
    held.push_back(
        tensor(suffixed(pass, name + ".tile.x"), {T, H_}, tile_dtype, Role::transient, component));
    held.push_back(
        tensor(suffixed(pass, name + ".tile.w"), {C, H_}, tile_dtype, Role::transient, component));
  }
  held.push_back(tensor(suffixed(pass, name + ".per_token"), {B_, S_ - 1, kPerTokenVectors},
                        DType::f32, Role::transient, component));
  return held;
}

// The CPU's torch fold's temporaries: `count` fp32 tiles, and with `target_mask` the backward's
// bool tile of which column is the target.
TensorIds HfBuilder::cpu_fold_tiles(const Name& name, const Pass& pass, int count,
                                    bool target_mask) {
  const auto [T, C] = logprob_tile();
  const std::optional<MemoryComponent> component = head_component(pass);
  TensorIds held;
  for (int k = 0; k < count; ++k)
    held.push_back(tensor(suffixed(pass, fmt::format("{}.tile.f32.{}", name, k)), {T, C},
                          DType::f32, Role::transient, component));
  if (target_mask)
    held.push_back(tensor(suffixed(pass, name + ".tile.is_target"), {T, C}, DType::u8,
                          Role::transient, component));
  return held;
}

// The final norm and TRL's fused LM head over the last block's output x.
HfHead HfBuilder::logprob_head_fwd(int x, bool x_grad, const ModelParams& params, int targets,
                                   const Pass& pass) {
  HfHead h;
  h.x = x;
  h.targets = targets;
  h.lm.name = "lm_head";
  h.lm.w = params.lm_head;
  h.lm.out = V_;
  h.lm.in = H_;
  h.final_norm = norm_fwd(params.final_norm, x, pass, -1, x_grad);
  const int hidden = h.final_norm.out;
  const Role role = saved(pass);
  const std::optional<MemoryComponent> component = head_component(pass);
  h.logp = tensor(suffixed(pass, "logps"), {B_, S_}, DType::f32, role, component);
  h.logz = tensor(suffixed(pass, "lm_head.logz"), {B_, S_}, DType::f32, role, component);
  h.entropy = tensor(suffixed(pass, "lm_head.entropy"), {B_, S_}, DType::f32, role, component);
  TensorIds outputs{h.logp, h.logz};
  // hidden_states[:, :-1], flattened: a copy, or on the CPU for one row a view of the hidden
  // states (on a GPU the head takes the scored positions, hidden_states[mask]: a copy).
  h.xs = hidden;
  if (!cpu_ || B_.size > 1)
    outputs.push_back(h.xs = tensor(suffixed(pass, "lm_head.hidden"), {B_, S_ - 1, H_},
                                    dtype_of(hidden), role, component));
  Op& o = gemm(OpKind::logprob_fwd, "lm_head.logprob", {hidden, h.lm.w.w, targets},
               std::move(outputs), -1, pass.recompute);
  o.held = logprob_scratch("lm_head.logprob", hidden, pass);
  if (cpu_) {
    const TensorIds fold = cpu_fold_tiles("lm_head.logprob", pass, kCpuTilesFwd, false);
    o.held.insert(o.held.end(), fold.begin(), fold.end());
  }
  o.held.push_back(h.entropy);
  return h;
}

// The reference's forwards under no_grad (KTO's over the KL sequences first), then the loss over
// the log-probabilities.
void HfBuilder::preference_loss_fwd(const HfHead& head, int tokens, int targets,
                                    HfPreference& pref) {
  const bool kto = cfg_.trainer == Trainer::kto;
  if (reference_of(cfg_) != Reference::precomputed) {
    if (kto)
      pref.ref_kl = no_grad_forward(".ref_kl", pref.kl_tokens, pref.kl_targets, pref.ref_params,
                                    pref.ref_weights);
    pref.ref = no_grad_forward(".ref", tokens, targets, pref.ref_params, pref.ref_weights);
  }
  pref.loss_in = {head.logp, pref.ref};
  if (kto) {
    pref.loss_in.push_back(pref.kl);
    pref.loss_in.push_back(pref.ref_kl);
  }
  const int loss = tensor("loss", {1}, DType::f32, Role::transient, kLoss);
  preference_attrs(op(OpKind::preference_loss, "preference.loss", pref.loss_in, {loss}, -1));
  p_.loss_tensor = loss;
}

// A loss op's trainer and beta (TRL's default, 0.1, for DPO and KTO alike).
Op& HfBuilder::preference_attrs(Op& o) const {
  o.trainer = cfg_.trainer;
  o.beta = 0.1f;
  return o;
}

// The loss's gradient in the policy's log-probabilities.
int HfBuilder::preference_loss_bwd(const HfHead& head, const HfPreference& pref) {
  on_autograd_thread();
  const int dlogp = grad_of(head.logp);
  preference_attrs(
      op(OpKind::preference_loss_bwd, "preference.loss.bwd", pref.loss_in, {dlogp}, -1))
      .grad_scale = loss_scale_;
  return dlogp;
}

// The fused head's backward, then the final norm's: the gradient of the last block's output.
// Its fp32 accumulators (the hidden states' and a trainable head's) are cast into the gradients.
int HfBuilder::logprob_head_bwd(HfHead& h, int dlogp, const ModelParams& params) {
  const int hidden = h.final_norm.out;
  const int dhidden = grad_of(hidden);
  Linear lm = h.lm;
  if (cfg_.model.tied_embeddings && lm.trainable())
    lm.w.grad = h.tied_grad = tensor("wte.grad.lm_head", {V_, H_}, wdt_, Role::transient);
  // The fp32 accumulators of the input's gradient and a trainable head's, live from the
  // backward's start; the outputs are their casts, made when its tile loop has ended.
  TensorIds accumulators{
      tensor("lm_head.logprob.bwd.dx_f32", {B_, S_ - 1, H_}, DType::f32, Role::transient, kLoss)};
  if (lm.trainable())
    accumulators.push_back(
        tensor("lm_head.logprob.bwd.dw_f32", {V_, H_}, DType::f32, Role::transient, kLoss));
  TensorIds scratch = logprob_scratch("lm_head.logprob.bwd", hidden, Pass{});
  // On the CPU the loop's fp32 tiles are freed before the casts: they are listed, with the
  // accumulators and the tile, on the op before (the loss's backward, which runs right before), so
  // that the outputs are not counted beside them.
  if (cpu_) {
    Op& before = p_.ops.back();
    const TensorIds loop = cpu_fold_tiles("lm_head.logprob.bwd", Pass{}, kCpuTilesBwd, true);
    before.held.insert(before.held.end(), loop.begin(), loop.end());
    before.held.insert(before.held.end(), scratch.begin(), scratch.end());
    before.held.insert(before.held.end(), accumulators.begin(), accumulators.end());
  }
  TensorIds outputs{dhidden};
  if (lm.trainable()) outputs.push_back(lm.w.grad);
  Op& o = gemm(OpKind::logprob_bwd, "lm_head.logprob.bwd", {dlogp, h.xs, lm.w.w, h.targets, h.logz},
               std::move(outputs), -1);
  o.held = std::move(scratch);
  o.held.insert(o.held.end(), accumulators.begin(), accumulators.end());
  o.held.push_back(h.entropy);
  const int dx = grad_of(h.x);
  norm_bwd(params.final_norm, h.final_norm, dhidden, h.x, dx, -1);
  return dx;
}

}  // namespace vrambench::build_hf
