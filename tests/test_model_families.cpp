// The blocks of other families in the step programs of both frameworks: Qwen3's and Gemma 3's
// q/k norms, Gemma's four norms a block, its fp32 (1 + w) norms and scaled embeddings, and Gemma
// 2's soft-capping, Phi-3's fused linears, where each keeps what transformers' code keeps. (Their
// gradients are checked against finite differences in test_cpu_train.cpp; their kernels in
// test_cpu_kernels.cpp.)
#include <gtest/gtest.h>

#include <stdexcept>
#include <string>

#include "config/run_config.h"
#include "core/error.h"
#include "device/host_runner.h"
#include "estimate/estimate.h"
#include "estimate/formula.h"
#include "model/families.h"
#include "model/model_file.h"
#include "program/program.h"
#include "program_counts.h"

namespace vrambench {
namespace {

RunConfig config(std::string_view preset, Framework framework, Attention attention,
                 Precision dtype = Precision::bf16) {
  RunConfig cfg;
  cfg.model = find_preset(preset).model;
  cfg.seq = 16;
  cfg.batch = 2;
  cfg.framework = framework;
  cfg.attention = attention;
  cfg.dtype = dtype;
  validate(cfg);
  return cfg;
}

const Op& op_named(const Program& p, std::string_view name) {
  for (const Op& op : p.ops)
    if (op.name == name) return op;
  throw std::runtime_error("no op " + std::string(name));
}

TEST(ModelFamilies, QkNormsNormEveryLayersHeadsAndKeepWhatTheirBackwardReads) {
  for (Framework framework : {Framework::lean, Framework::hf}) {
    SCOPED_TRACE(to_string(framework));
    const Program p = build_program(config("tiny-qwen3", framework, Attention::flash), 0);
    EXPECT_EQ(count_ops(p, OpKind::qk_norm_fwd), 2);
    EXPECT_EQ(count_ops(p, OpKind::qk_norm_bwd), 2);
    // Statistics per query and key head of every token, saved; the weights [D] train.
    const Tensor& rstd = p.tensor(find_tensor(p, "layer0.attn.qk_norm.rstd"));
    EXPECT_EQ(rstd.shape, (Shape{2, 16, 4 + 2}));
    EXPECT_EQ(rstd.role, Role::activation);
    EXPECT_EQ(p.tensor(find_tensor(p, "layer1.attn.k_norm.w.grad")).shape, Shape{16});
    // Rope reads the normed q|k|v, not the projection.
    EXPECT_EQ(op_named(p, "layer0.attn.rope").inputs[0], find_tensor(p, "layer0.attn.qk_norm.out"));
    // Qwen3's norm is plain; Gemma 3's scales by (1 + w).
    EXPECT_EQ(op_named(p, "layer0.attn.qk_norm").norm_offset, 0.0f);
    const Program g = build_program(config("tiny-gemma3", framework, Attention::flash), 0);
    EXPECT_EQ(op_named(g, "layer0.attn.qk_norm").norm_offset, 1.0f);
  }
  // hf computes the norms on an fp32 copy of q and k, which it keeps for the backward: 4 (A + K) D
  // bytes a token, held by q|k|v (which the backward kernel reads) and a tensor for the rest.
  const Program hf = build_program(config("tiny-qwen3", Framework::hf, Attention::flash), 0);
  const Tensor& qkv = hf.tensor(find_tensor(hf, "layer0.attn.qkv"));
  const Tensor& rest = hf.tensor(find_tensor(hf, "layer0.attn.qk_norm.x_f32.rest"));
  EXPECT_EQ(qkv.role, Role::activation);
  EXPECT_EQ(rest.role, Role::activation);
  EXPECT_EQ(qkv.bytes + rest.bytes, 2 * 16 * 4 * (4 + 2) * 16);
}

TEST(ModelFamilies, GemmaHasFourNormsABlockScaledEmbeddingsAndGeglu) {
  for (Framework framework : {Framework::lean, Framework::hf}) {
    SCOPED_TRACE(to_string(framework));
    const Program p = build_program(config("tiny-gemma2", framework, Attention::flash), 0);
    // Four norms a block and the final one, each scaling by (1 + w).
    EXPECT_EQ(count_ops(p, OpKind::rmsnorm_fwd), 2 * 4 + 1);
    for (const Op& op : p.ops) {
      if (op.kind == OpKind::rmsnorm_fwd || op.kind == OpKind::rmsnorm_bwd) {
        EXPECT_EQ(op.norm_offset, 1.0f) << op.name;
      }
    }
    // The attention's norm reads its output projection's output (hf: its fp32 copy, x.float());
    // the residual adds the norm's output.
    const Op& post = op_named(p, "layer0.post_attn_norm");
    EXPECT_EQ(post.inputs[0],
              find_tensor(p, framework == Framework::lean ? "layer0.attn.o.out"
                                                          : "layer0.post_attn_norm.x_f32"));
    EXPECT_EQ(op_named(p, "layer0.attn.residual").inputs[1], post.outputs[0]);
    EXPECT_EQ(op_named(p, "embed").embed_scale, 8.0f);  // sqrt(64)
    EXPECT_TRUE(op_named(p, "layer1.mlp.swiglu").gelu_gate);
    EXPECT_TRUE(op_named(p, "layer1.mlp.swiglu.bwd").gelu_gate);
  }
  // hf under bf16: Gemma's norm keeps its normalised x in fp32 ((x * w).to(bf16), not Llama's
  // x.to(bf16) * w) and the scaled embedding is a second [B, S, H] tensor.
  const Program hf = build_program(config("tiny-gemma2", Framework::hf, Attention::flash), 0);
  EXPECT_EQ(hf.tensor(find_tensor(hf, "layer0.attn_norm.normed")).dtype, DType::f32);
  EXPECT_EQ(hf.tensor(find_tensor(hf, "embed.unscaled")).shape, (Shape{2, 16, 64}));
  const Program llama = build_program(config("tiny-llama", Framework::hf, Attention::flash), 0);
  EXPECT_EQ(llama.tensor(find_tensor(llama, "layer0.attn_norm.normed")).dtype, DType::bf16);
}

TEST(ModelFamilies, SoftCappingKeepsTheCappedScoresAndLogits) {
  for (Framework framework : {Framework::lean, Framework::hf}) {
    SCOPED_TRACE(to_string(framework));
    // Eager attention: scores -> cap -> softmax, the capped scores saved for the cap's backward.
    const Program eager = build_program(config("tiny-gemma2", framework, Attention::eager), 0);
    EXPECT_EQ(count_ops(eager, OpKind::softcap_fwd), 2 + 1);  // each layer's scores, the logits
    EXPECT_EQ(count_ops(eager, OpKind::softcap_bwd), 2 + 1);
    EXPECT_EQ(op_named(eager, "layer0.attn.softcap").softcap, 5.0f);
    EXPECT_EQ(op_named(eager, "logits.softcap").softcap, 10.0f);
    const Tensor& capped = eager.tensor(find_tensor(eager, "layer0.attn.scores_capped"));
    EXPECT_EQ(capped.shape, (Shape{2, 4, 16, 16}));
    EXPECT_EQ(capped.role, Role::activation);
    // The loss reads the capped logits; the lm head's own output is a temporary.
    EXPECT_EQ(eager.tensor(find_tensor(eager, "logits.uncapped")).role, Role::transient);
    // Fused attention caps inside the kernel: no scores, the cap an attribute of the ops.
    const Program flash = build_program(config("tiny-gemma2", framework, Attention::flash), 0);
    EXPECT_EQ(count_ops(flash, OpKind::softcap_fwd), 1);
    EXPECT_EQ(op_named(flash, "layer1.attn.flash").softcap, 5.0f);
    EXPECT_EQ(op_named(flash, "layer1.attn.flash.bwd").softcap, 5.0f);
  }
  // Models without caps have none.
  const Program gemma3 = build_program(config("tiny-gemma3", Framework::hf, Attention::eager), 0);
  EXPECT_EQ(count_ops(gemma3, OpKind::softcap_fwd), 0);
}

// A tied model (Qwen3 0.6B's shape) keeps one embedding gradient in both frameworks.
TEST(ModelFamilies, TiedQwen3KeepsOneEmbeddingGradient) {
  for (Framework framework : {Framework::lean, Framework::hf}) {
    const Program p = build_program(config("tiny-qwen3", framework, Attention::flash), 0);
    int embedding_grads = 0;
    for (const Tensor& t : p.tensors)
      embedding_grads += t.role == Role::grad && t.shape == Shape{256, 64};
    EXPECT_EQ(embedding_grads, 1) << to_string(framework);
  }
}

bool holds(const Op& op, int tensor) {
  for (int id : op.held)
    if (id == tensor) return true;
  return false;
}

// Phi-3: one [2F, H] gate_up linear whose output the swiglu ops read packed, and one qkv_proj; a
// LoRA adapter and a quantised module for each fused linear as one module, as PEFT and
// bitsandbytes see them.
TEST(ModelFamilies, Phi3FusedLinearsAreOneLinearOneAdapterOneQuantisedModule) {
  const std::int64_t F = 176, H = 64, Q = (4 + 2 * 2) * 16;
  for (Framework framework : {Framework::lean, Framework::hf}) {
    SCOPED_TRACE(to_string(framework));
    const Program p = build_program(config("tiny-phi3", framework, Attention::flash), 0);
    EXPECT_EQ(p.tensor(find_tensor(p, "layer0.mlp.gate_up.w")).shape, (Shape{2 * F, H}));
    EXPECT_THROW(find_tensor(p, "layer0.mlp.up.w"), InternalError);
    EXPECT_EQ(p.tensor(find_tensor(p, "layer0.attn.qkv.w")).shape, (Shape{Q, H}));
    const Op& fwd = op_named(p, "layer1.mlp.swiglu");
    ASSERT_EQ(fwd.inputs.size(), 1u);
    EXPECT_EQ(p.tensor(fwd.inputs[0]).shape, (Shape{2, 16, 2 * F}));
    const Op& bwd = op_named(p, "layer1.mlp.swiglu.bwd");
    ASSERT_EQ(bwd.outputs.size(), 1u);
    EXPECT_EQ(p.tensor(bwd.outputs[0]).shape, (Shape{2, 16, 2 * F}));

    RunConfig cfg = config("tiny-phi3", framework, Attention::flash);
    cfg.finetune = Finetune::qlora;
    cfg.lora_rank = 4;
    validate(cfg);
    const Program q = build_program(cfg, 0);
    std::int64_t adapter_elements = 0;
    for (const Tensor& t : q.tensors)
      if (t.name.find(".lora_") != std::string::npos && t.role == Role::weight)
        adapter_elements += t.elements();
    EXPECT_EQ(adapter_elements, lora_parameter_count(cfg));
    EXPECT_EQ(q.tensor(find_tensor(q, "layer0.mlp.gate_up.lora_B")).shape, (Shape{2 * F, 4}));
    EXPECT_EQ(q.tensor(find_tensor(q, "layer0.attn.qkv.lora_B")).shape, (Shape{Q, 4}));
    EXPECT_NO_THROW(find_tensor(q, "layer0.attn.qkv.w.weight"));
    EXPECT_THROW(find_tensor(q, "layer0.attn.q.w.weight"), InternalError);
  }
}

// hf: Phi-3's rope concatenates, which leaves sdpa's query (and so its output) in [B, A, S, D]
// order: the output the kernel keeps is copied for o_proj, which keeps the copy where it trains
// (tests/data/torch_reference.json's phi3-small rows measure it); under LoRA its fp32 adapters
// keep their own cast instead (torch_finetune_reference.json).
TEST(ModelFamilies, Phi3SdpaKeepsItsOutputBesideTheCopyATrainingOProjReads) {
  const Program hf = build_program(config("tiny-phi3", Framework::hf, Attention::flash), 0);
  const Tensor& copy = hf.tensor(find_tensor(hf, "layer0.attn.y.copy"));
  EXPECT_EQ(copy.role, Role::activation);
  EXPECT_TRUE(holds(op_named(hf, "layer0.attn.flash"), copy.id));
  int released_by = 0;
  for (const Op& op : hf.ops)
    if (op.name.starts_with("layer0.attn.o") && holds(op, copy.id)) ++released_by;
  EXPECT_EQ(released_by, 1);  // the o_proj backward's last op
  RunConfig lora = config("tiny-phi3", Framework::hf, Attention::flash);
  lora.finetune = Finetune::lora;
  EXPECT_THROW(find_tensor(build_program(lora, 0), "layer0.attn.y.copy"), InternalError);
  const Program llama = build_program(config("tiny-llama", Framework::hf, Attention::flash), 0);
  EXPECT_THROW(find_tensor(llama, "layer0.attn.y.copy"), InternalError);
}

// Gemma 3 with an 8-token window on its first layer (4 heads, 2 key/value heads) at S=16, B=2.
RunConfig windowed(Attention attention, std::int64_t seq, std::int64_t kv_heads = 2,
                   Recompute recompute = Recompute::none) {
  RunConfig cfg = config("tiny-gemma3", Framework::hf, attention);
  cfg.model = model_from_config_text(
      R"({"model_type": "gemma3_text", "hidden_size": 64, "num_attention_heads": 4,
          "num_key_value_heads": )" +
          std::to_string(kv_heads) + R"(, "head_dim": 16, "num_hidden_layers": 2,
          "intermediate_size": 176, "vocab_size": 256, "sliding_window": 8,
          "layer_types": ["sliding_attention", "full_attention"]})",
      "windowed", "");
  cfg.seq = seq;
  cfg.recompute = recompute;
  validate(cfg);
  return cfg;
}

bool has_tensor(const Program& p, std::string_view name) {
  for (const Tensor& t : p.tensors)
    if (t.name == name) return true;
  return false;
}

// transformers hands sdpa a boolean mask for a sliding layer at a sequence of the window or
// longer; sdpa makes an additive one in q's dtype over the batch ([B, 1, S, S]) and saves it, and
// grouped key/value heads reach it as copies (repeat_kv), but one head's repeat, a view.
TEST(ModelFamilies, SdpaSlidingLayersSaveTheMaskTheyAreGiven) {
  const Program p = build_program(windowed(Attention::flash, 16), 0);
  const int bias = find_tensor(p, "layer0.attn.mask_bias");
  EXPECT_EQ(p.tensor(bias).shape, (Shape{2, 1, 16, 16}));
  EXPECT_EQ(p.tensor(bias).dtype, DType::bf16);
  EXPECT_EQ(p.tensor(bias).role, Role::activation);
  EXPECT_TRUE(holds(op_named(p, "layer0.attn.flash"), bias));
  EXPECT_TRUE(holds(op_named(p, "layer0.attn.flash.bwd"), bias));
  const int mask = find_tensor(p, "attn.sliding_mask");
  EXPECT_EQ(p.tensor(mask).bytes, 16 * 16);  // bool, expanded over the batch
  EXPECT_TRUE(holds(op_named(p, "layer0.attn.flash"), mask));
  EXPECT_EQ(p.tensor(find_tensor(p, "layer0.attn.kv_repeat")).shape, (Shape{2, 2, 16, 2 * 16}));
  // The full-attention layer runs causal, without a mask or copies.
  EXPECT_FALSE(has_tensor(p, "layer1.attn.mask_bias") || has_tensor(p, "layer1.attn.kv_repeat"));
  EXPECT_FALSE(holds(op_named(p, "layer1.attn.flash"), mask));
  // Below the window no layer gets a mask; with one key/value head the repeat is a view.
  const Program shorter = build_program(windowed(Attention::flash, 4), 0);
  EXPECT_FALSE(has_tensor(shorter, "attn.sliding_mask") ||
               has_tensor(shorter, "layer0.attn.mask_bias"));
  const Program mqa = build_program(windowed(Attention::flash, 16, 1), 0);
  EXPECT_TRUE(has_tensor(mqa, "layer0.attn.mask_bias"));
  EXPECT_FALSE(has_tensor(mqa, "layer0.attn.kv_repeat"));
  EXPECT_EQ(p.tensor(bias).component, MemoryComponent::attention_masks);
  EXPECT_EQ(p.tensor(mask).component, MemoryComponent::attention_masks);
  // The estimate files them under their own component: Gemma 3 1B at S 2048 keeps its 22 sliding
  // layers' [1, S, S] bf16 masks per sequence to the loss's backward, its peak.
  RunConfig gemma3 = config("gemma3-1b", Framework::hf, Attention::flash);
  gemma3.finetune = Finetune::lora;
  gemma3.seq = 2048;
  gemma3.batch = 1;
  validate(gemma3);
  const DeviceOverhead overhead{512 * MiB, 32 * MiB, 0, false, false};
  const Breakdown b = analyze(gemma3, overhead);
  EXPECT_EQ(b.component(MemoryComponent::attention_masks, 2) -
                b.component(MemoryComponent::attention_masks, 1),
            22 * 2048 * 2048 * 2);
  // Checkpointed, the recompute saves the bias for the backward; the forward's goes with it.
  const Program ckpt = build_program(windowed(Attention::flash, 16, 2, Recompute::full), 0);
  EXPECT_EQ(ckpt.tensor(find_tensor(ckpt, "layer0.attn.mask_bias")).role, Role::transient);
  EXPECT_TRUE(holds(op_named(ckpt, "layer0.attn.flash.bwd"),
                    find_tensor(ckpt, "layer0.attn.mask_bias.recompute")));
}

// Eager attention: a model with a mask per kind of layer (Gemma) makes both, each [B, 1, S, S] in
// the model's dtype, and holds both through the forward; a recompute keeps the one its layer
// reads.
TEST(ModelFamilies, EagerGemmaMakesAMaskPerKindOfLayer) {
  const Program p = build_program(windowed(Attention::eager, 4), 0);
  const int full = find_tensor(p, "attn.causal_mask");
  const int sliding = find_tensor(p, "attn.sliding_causal_mask");
  EXPECT_EQ(p.tensor(sliding).shape, p.tensor(full).shape);
  for (const char* layer : {"layer0.attn.scores", "layer1.attn.scores"}) {
    EXPECT_TRUE(holds(op_named(p, layer), full)) << layer;
    EXPECT_TRUE(holds(op_named(p, layer), sliding)) << layer;
  }
  const Program ckpt = build_program(windowed(Attention::eager, 4, 2, Recompute::full), 0);
  const Op& sliding_again = op_named(ckpt, "layer0.attn.scores.recompute");
  const Op& full_again = op_named(ckpt, "layer1.attn.scores.recompute");
  EXPECT_TRUE(holds(sliding_again, find_tensor(ckpt, "attn.sliding_causal_mask")));
  EXPECT_FALSE(holds(sliding_again, find_tensor(ckpt, "attn.causal_mask")));
  EXPECT_TRUE(holds(full_again, find_tensor(ckpt, "attn.causal_mask")));
  EXPECT_FALSE(holds(full_again, find_tensor(ckpt, "attn.sliding_causal_mask")));
  // Llama makes one.
  const Program llama = build_program(config("tiny-llama", Framework::hf, Attention::eager), 0);
  EXPECT_FALSE(has_tensor(llama, "attn.sliding_causal_mask"));
}

}  // namespace
}  // namespace vrambench
