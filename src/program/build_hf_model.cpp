// Builds the hf step program: what PyTorch eager autograd allocates when it runs Hugging Face
// transformers' GPT-2 (GPT2LMHeadModel) or Llama (LlamaForCausalLM) model code for one training
// step, with the loss the model computes from `labels`, optional gradient checkpointing
// (non-reentrant, per decoder layer) and the optimizer; under fine-tuning, PEFT's LoRA adapters
// over a frozen base (bitsandbytes' 4-bit layers under QLoRA), where only what requires grad keeps
// what its backward reads (hf_linears.h). docs/memory-model.md ("Frameworks") lists what each op
// keeps and where that comes from; tests/test_hf_reference.cpp checks the tensor peak against
// PyTorch's own count (tests/data/torch_reference.json).
//
// This file holds the model around the blocks: its parameters, laid out from the weights
// description, the embeddings, the blocks in order (and again under checkpointing), the head and
// the loss; hf_builder.h lists the parts.
#include <fmt/format.h>

#include <cstdint>
#include <utility>
#include <vector>

#include "core/error.h"
#include "program/hf_builder.h"
#include "program/shard.h"
#include "program/signature.h"

namespace vrambench {
namespace build_hf {

HfBuilder::HfBuilder(const RunConfig& cfg, Bytes gemm_workspace, const HfOptions& options)
    : HfLinears(cfg, gemm_workspace, options.device == HfOptions::Device::cpu) {
  if (!cpu_) per_thread_workspaces();
  eager_ = cfg.attention == Attention::eager;
  dropout_ = cfg.dropout > 0.0;
  fused_ = cfg.model.fused_linears;
  resid_dropout_ = dropout_ && (gpt_ || cfg.model.resid_dropout);
  ckpt_ = cfg.recompute == Recompute::full;
}

Program HfBuilder::build() {
  build_model();
  add_optimizer();
  if (cfg_.loop == Loop::native && logits_ >= 0) p_.ops.back().held.push_back(logits_);
  return std::move(p_);
}

void HfBuilder::build_model() {
  const ModelConfig& m = cfg_.model;
  loss_scale_ = step_loss_scale(cfg_);
  const int tokens = tensor("tokens", {B_, S_}, DType::i32, Role::input);
  const int targets = tensor("targets", {B_, S_}, DType::i32, Role::input);

  // Under fine-tuning every parameter of the model is frozen (the lm head is never a LoRA
  // target); the adapters are made with the block linears.
  const Train train = finetune_ ? Train::frozen : Train::full;
  auto param = [&](const Name& name, Shape shape) { return weight(name, shape, -1, train); };
  const ModelWeights description = model_weights(m, S_);
  ModelParams params;
  auto block_of = [&](int l) { return block_weights(description.layer(l), l); };
  const std::vector<BlockWeights> weights =
      build_common::lay_out_model(description, m.layers, params, param, block_of);
  // The embedding output requires grad under full training, and under fine-tuning with
  // checkpointing: transformers' gradient_checkpointing_enable (and PEFT's
  // prepare_model_for_kbit_training) call enable_input_require_grads.
  const bool x0_grad = !finetune_ || ckpt_;

  // Shared inputs of every layer: the causal mask eager attention adds ([B, 1, S, S] in the
  // model's dtype; sdpa gets none without padding and runs causal, on real tensors: under
  // FakeTensorMode transformers cannot read the padding mask and makes one), llama's rotary cos
  // and sin ([S, D] each, in the residual stream's dtype). They live while a layer may still
  // run: through the forward, and with checkpointing through the last recompute.
  if (eager_)
    mask_ = tensor("attn.causal_mask", {B_, 1, S_, S_}, wdt_, Role::transient,
                   MemoryComponent::attention_masks);
  // The sliding-window layers' mask: eager's second one where the model makes a mask per kind of
  // layer (its sliding layers read it; the others keep the one above, which stands for the
  // sliding one where every layer slides); sdpa's boolean one ([1, 1, S, S], expanded over the
  // batch) where a layer gets a mask at this sequence.
  if (eager_ && m.mask_per_layer_kind) {
    sliding_mask_ = tensor("attn.sliding_causal_mask", {B_, 1, S_, S_}, wdt_, Role::transient,
                           MemoryComponent::attention_masks);
  } else if (!eager_ && sliding_masks_at(m, S_)) {
    sliding_mask_ = tensor("attn.sliding_mask", {1, 1, S_, S_}, DType::u8, Role::transient,
                           MemoryComponent::attention_masks);
  }
  if (!gpt_) cos_sin_ = tensor("rope.cos_sin", {2, S_, D_}, wdt_, Role::activation);

  // A preference trainer's reference and KTO's KL forward under no_grad, before the policy's.
  const bool preference = is_preference(cfg_);
  HfPreference pref;
  if (preference) pref = preference_setup(description, params, weights);
  if (pref.kl_tokens >= 0)
    pref.kl = no_grad_forward(".kl", pref.kl_tokens, pref.kl_targets, params, weights);

  const HfEmbeddings embeddings = embeddings_fwd(tokens, params, x0_grad);
  const Pass pass = forward_pass();
  std::vector<HfBlockTensors> blocks;
  int x = embeddings.x0;
  bool x_grad = x0_grad;
  for (int l = 0; l < static_cast<int>(m.layers); ++l) {
    blocks.push_back(block_fwd(l, x, weights[static_cast<std::size_t>(l)], pass, x_grad));
    x = blocks.back().x_out;
    x_grad = blocks.back().x_mid_grad || blocks.back().mlp_grad;
  }
  HfHead head = preference ? logprob_head_fwd(x, x_grad, params, targets, Pass{})
                           : head_fwd(x, x_grad, params, targets);
  if (preference) preference_loss_fwd(head, tokens, targets, pref);
  if (m.router_aux_loss) aux_loss_fwd(blocks);

  if (m.router_aux_loss) aux_loss_bwd(blocks);
  int dx = preference ? logprob_head_bwd(head, preference_loss_bwd(head, pref), params)
                      : head_bwd(head, params, targets);
  for (int l = static_cast<int>(m.layers) - 1; l >= 0 && dx >= 0; --l) {
    const BlockWeights& w = weights[static_cast<std::size_t>(l)];
    HfBlockTensors b = blocks[static_cast<std::size_t>(l)];
    if (ckpt_) b = block_fwd(l, b.x_in, w, recompute_pass(), b.x_in_grad);
    dx = block_bwd(b, w, dx);
  }
  embeddings_bwd(dx, tokens, params, embeddings, head.tied_grad);
}

// Embeddings (not autocast: fp32 under autocast), then the embedding dropout; in `pass` (a
// forward under no_grad is a recompute pass of its own names).
HfEmbeddings HfBuilder::embeddings_fwd(int tokens, const ModelParams& params, bool x0_grad,
                                       const Pass& pass) {
  HfEmbeddings e;
  e.x0 = tensor(suffixed(pass, "x0"), bsh(), wdt_, x0_grad ? Role::activation : Role::transient);
  TensorIds embed_in{tokens, params.wte.w};
  if (gpt_) embed_in.push_back(params.wpe.w);
  e.out = e.x0;
  if (dropout_ && gpt_) e.out = tensor("embed.out", bsh(), wdt_, Role::transient);
  Op& embed = embed_attrs(
      op(OpKind::embedding_fwd, "embed", std::move(embed_in), {e.out}, -1, pass.recompute));
  // Gemma's scaled embedding: the lookup's output times sqrt(hidden), a new tensor.
  if (cfg_.model.embed_scale)
    embed.held.push_back(tensor(suffixed(pass, "embed.unscaled"), bsh(), wdt_, Role::transient));
  // Token and position embeddings are separate tensors before their sum.
  // Under fine-tuning with input gradients the token embeddings are a leaf that requires grad,
  // which its AccumulateGrad node holds until the backward ends.
  e.leaf = finetune_ && x0_grad;
  if (gpt_)
    embed.held.push_back(e.tokens = tensor(suffixed(pass, "embed.tokens"), bsh(), wdt_,
                                           e.leaf ? Role::activation : Role::transient));
  if (dropout_ && gpt_) {
    e.mask = tensor("embed.mask", bsh(), mask_dtype(e.out), Role::activation,
                    MemoryComponent::embedding_dropout_mask);
    dropout_attrs(op(OpKind::dropout_fwd, "embed.dropout", {e.out}, {e.x0, e.mask}, -1), -1,
                  DropoutSite::embedding);
  }
  return e;
}

// The final norm of the last block's output x, the lm head, final soft-capping and the loss.
HfHead HfBuilder::head_fwd(int x, bool x_grad, const ModelParams& params, int targets) {
  HfHead h;
  h.x = x;
  h.lm.name = "lm_head";
  h.lm.w = params.lm_head;
  h.lm.out = V_;
  h.lm.in = H_;
  h.final_norm = norm_fwd(params.final_norm, x, Pass{}, -1, x_grad);
  constexpr MemoryComponent kLoss = MemoryComponent::logits_and_loss;
  logits_ = tensor("logits", {M_, V_}, cdt_, Role::activation, kLoss);
  // Final soft-capping (Gemma 2): logits / cap (a temporary), tanh (its output saved: the
  // model's logits stand for it), times cap; the lm head's output is the division's alone.
  const double cap = cfg_.model.final_softcap;
  h.head_out =
      cap > 0.0 ? tensor("logits.uncapped", {M_, V_}, cdt_, Role::transient, kLoss) : logits_;
  h.lm_saved = linear_fwd(h.lm, h.final_norm.out, h.head_out, -1, Pass{}, x_grad);
  if (cap > 0.0)
    softcap_op("logits.softcap", h.head_out, logits_, -1, cap)
        .held.push_back(tensor("logits.softcap.div", {M_, V_}, cdt_, Role::transient, kLoss));
  // The loss (transformers' ForCausalLMLoss): logits.float(), then cross entropy, whose
  // log-softmax output (fp32, B S V), made second, is saved; the fp32 logits, made first, go when
  // the loss function returns. The kernels read and write one fp32 tensor, logits.f32, which
  // stands for the saved output: `logits.float` before it, the same size, is the block that
  // goes, so that each block's place and lifetime are PyTorch's (at the limit, which of the two
  // stays decides what the caching allocator can still place).
  const int logits_float =
      cdt_ == DType::f32 ? -1
                         : tensor("logits.float", {M_, V_}, DType::f32, Role::transient, kLoss);
  h.logits_f32 = cast(logits_, DType::f32, "logits.f32", Role::activation, -1, false);
  p_.tensors[static_cast<std::size_t>(h.logits_f32)].component = kLoss;
  if (logits_float >= 0) p_.ops.back().held.push_back(logits_float);
  const int loss = tensor("loss", {1}, DType::f32, Role::transient, kLoss);
  h.lse = tensor("ce.lse", {M_}, DType::f32, Role::activation, kLoss);
  Op& ce = op(OpKind::cross_entropy_fwd, "ce", {h.logits_f32, targets}, {loss, h.lse}, -1);
  // Autocast's cache of 16-bit weights lives until the autocast region (forward and loss) ends.
  ce.held = autocast_cache_;
  // The model's forward keeps the last hidden states and its output object the logits while the
  // loss is computed.
  ce.held.push_back(h.final_norm.out);
  if (logits_float >= 0) {
    ce.held.push_back(logits_);
    ce.held.push_back(logits_float);
  } else {
    // The logits are fp32 already and stand for the saved output: the log-softmax is made
    // beside them.
    ce.held.push_back(tensor("ce.log_softmax", {M_, V_}, DType::f32, Role::transient, kLoss));
  }
  // Where the loss reads fp32 logits in place, they stand for its saved log-softmax output,
  // unless something else keeps them to the backward: the output object of the native loop, or
  // soft-capping's tanh, for whose output they stand. Then the log-probabilities are a tensor of
  // their own.
  if ((cfg_.loop == Loop::native || cap > 0.0) && h.logits_f32 == logits_)
    ce.held.push_back(log_probs_ =
                          tensor("ce.log_probs", {M_, V_}, DType::f32, Role::activation, kLoss));
  p_.loss_tensor = loss;
  return h;
}

// The backward of the loss, the head and the final norm: the gradient of the last block's
// output.
int HfBuilder::head_bwd(HfHead& h, const ModelParams& params, int targets) {
  constexpr MemoryComponent kLoss = MemoryComponent::logits_and_loss;
  // The log-softmax's gradient and the logits' (both fp32, B S V) before the cast, on the
  // autograd engine's thread.
  // nll_loss's backward makes the first, log_softmax's the second.
  on_autograd_thread();
  const int dlog_probs = tensor("ce.log_probs.grad", {M_, V_}, DType::f32, Role::transient, kLoss);
  const int dlogits_f32 = grad_of(h.logits_f32);
  Op& ce_bwd =
      op(OpKind::cross_entropy_bwd, "ce.bwd", {h.logits_f32, targets, h.lse}, {dlogits_f32}, -1);
  ce_bwd.grad_scale = loss_scale_;
  ce_bwd.held.push_back(dlog_probs);
  if (log_probs_ >= 0) ce_bwd.held.push_back(log_probs_);
  int dlogits = dlogits_f32;
  if (h.logits_f32 != logits_) {
    dlogits = grad_of(logits_);
    op(OpKind::cast, "logits.f32.grad.cast", {dlogits_f32}, {dlogits}, -1);
  }
  if (h.head_out != logits_) {
    const int dhead = grad_of(h.head_out);
    softcap_bwd_op("logits.softcap.bwd", dlogits, logits_, dhead, -1, cfg_.model.final_softcap);
    dlogits = dhead;
  }
  // A tied weight's two gradients meet in autograd's input buffer of its AccumulateGrad: the lm
  // head's waits there through the whole backward, the embedding's joins it, and their sum
  // (a third [V, H] tensor) becomes .grad.
  Linear lm_target = h.lm;
  if (cfg_.model.tied_embeddings && h.lm.trainable())
    lm_target.w.grad = h.tied_grad = tensor("wte.grad.lm_head", {V_, H_}, wdt_, Role::transient);
  const int dfinal_out = linear_bwd(lm_target, h.lm_saved, dlogits, -1);
  const int dx = grad_of(h.x);
  norm_bwd(params.final_norm, h.final_norm, dfinal_out, h.x, dx, -1);
  return dx;
}

// The embeddings' backward from the gradient of the first block's input; a tied head's gradient
// (`lm_head_grad`) joins the token embedding's.
void HfBuilder::embeddings_bwd(int dx, int tokens, const ModelParams& params, const HfEmbeddings& e,
                               int lm_head_grad) {
  if (e.leaf && e.tokens >= 0) p_.ops.back().held.push_back(e.tokens);
  const Param& wte = params.wte;
  if (!wte.trainable()) return;  // fine-tuning: the embeddings are frozen

  int dembed = dx;
  if (e.mask >= 0) dembed = dropout_bwd("embed", dx, e.mask, e.out, -1, DropoutSite::embedding);
  const bool tied = cfg_.model.tied_embeddings;
  const int dwte_embed =
      tied ? tensor("wte.grad.embedding", {V_, H_}, wdt_, Role::transient) : wte.grad;
  TensorIds embed_grads{dwte_embed};
  if (gpt_) embed_grads.push_back(params.wpe.grad);
  Op& embed_bwd = embed_attrs(
      row_sum(OpKind::embedding_bwd, "embed.bwd", {dembed, tokens}, std::move(embed_grads), -1));
  // The scaled embedding's backward: the gradient times sqrt(hidden), a new tensor.
  if (cfg_.model.embed_scale)
    embed_bwd.held.push_back(tensor("embed.unscaled.grad", bsh(), wdt_, Role::transient));
  if (tied) op(OpKind::add, "wte.grad.sum", {lm_head_grad, dwte_embed}, {wte.grad}, -1);
}

}  // namespace build_hf

Program build_hf_program(const RunConfig& cfg, Bytes gemm_workspace, const HfOptions& options) {
  if (gemm_workspace < 0)
    throw InternalError(
        fmt::format("build_hf_program: negative GEMM workspace {}", gemm_workspace));
  if (framework_of(cfg) != Framework::hf || cfg.scope != Scope::model)
    throw InternalError("build_hf_program: a validated --framework hf whole-model configuration");
  Program program = build_hf::HfBuilder(cfg, gemm_workspace, options).build();
  shard_for_rank(program);
  // Accumulating over micro-steps, the .grad tensors are there before the step (liveness keeps
  // them whole-step), and autograd's AccumulateGrad adds each new gradient into its .grad in place
  // (torch/csrc/autograd/functions/accumulate_grad.h: `variable_grad += new_grad`): the new
  // gradient is a tensor of the .grad's size, made by the op that computes it and freed after the
  // add. In the first micro-step AccumulateGrad keeps new_grad as .grad and makes no copy; the
  // program is a later one.
  if (cfg.grad_accum > 1) {
    for (Op& op : program.ops) {
      TensorIds fresh;
      for (int id : op.outputs) {
        if (program.tensor(id).role != Role::grad) continue;
        // A copy: add_tensor grows the tensor list. A parameter's gradient holds no batch
        // dimension, so the new tensor adds none to batch_dims.
        const Tensor g = program.tensor(id);
        fresh.push_back(program.add_tensor(g.name + ".new", g.shape, g.dtype, Role::transient));
      }
      op.held.insert(op.held.end(), fresh.begin(), fresh.end());
    }
  }
  for (const Op& op : program.ops) check_op(program, op);
  return program;
}

}  // namespace vrambench
