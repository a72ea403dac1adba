// The memory model read off the step program against values worked out here from the formula's
// terms: parameter counts, bytes per parameter, Korthikanti's per-layer activations, logits and
// the peak moments; and against the program's own live bytes, to the byte.
#include <gtest/gtest.h>

#include <algorithm>
#include <limits>
#include <string>

#include "core/error.h"
#include "device/device.h"
#include "estimate/estimate.h"
#include "model/families.h"
#include "program/program.h"
#include "program/schedule.h"
#include "measure/measure.h"

namespace vrambench {
namespace {

// The H100 profile of the worked examples: 81559 MiB total, 512 MiB context, 32 MiB workspace; the
// tensors' bytes alone, without the allocator's share (a replay, held against the sim in
// test_estimate_allocator.cpp and the grids).
constexpr Bytes kH100 = 81559 * MiB;
constexpr DeviceOverhead kOverhead{512 * MiB, 32 * MiB, 0, false, false};
constexpr Bytes kContextAndWorkspace = 512 * MiB + 32 * MiB;

constexpr Bytes kGpt2Params = 124'439'808;  // tied embeddings, 1024 positions
constexpr Bytes kLlama2Params = 6'738'415'616;

RunConfig config(std::string_view preset, std::int64_t seq) {
  RunConfig cfg;
  cfg.framework = Framework::lean;
  cfg.model = find_preset(preset).model;
  cfg.seq = seq;
  cfg.dtype = Precision::bf16;
  cfg.attention = Attention::flash;
  cfg.recompute = Recompute::none;
  cfg.optimizer = Optimizer::adamw;
  cfg.dropout = 0.0;
  cfg.allocator = AllocatorKind::direct;
  return cfg;
}

// The name of cfg's last op (the end of the step: an optimizer step, or the last backward op).
std::string last_op(const RunConfig& cfg) {
  return build_program(cfg, kOverhead.gemm_workspace).ops.back().name.str();
}

const Moment* find_moment(const Breakdown& b, const std::string& name) {
  for (const Moment& m : b.other_moments)
    if (m.name == name) return &m;
  return nullptr;
}

TEST(EstimateModelState, ParameterCountsOfThePresets) {
  // bf16 weights are 2 bytes per parameter.
  EXPECT_EQ(analyze(config("gpt2", 1024), kOverhead).component(MemoryComponent::weights),
            2 * kGpt2Params);
  EXPECT_EQ(analyze(config("llama2-7b", 1024), kOverhead).component(MemoryComponent::weights),
            2 * kLlama2Params);
  // Past 1024 tokens gpt2's position table grows to the sequence: 3072 more rows of 768.
  EXPECT_EQ(analyze(config("gpt2", 4096), kOverhead).component(MemoryComponent::weights),
            2 * (kGpt2Params + 3072 * 768));
}

// gpt2, bf16, flash attention, no dropout, adamw. With a 50257-entry vocabulary the peak is the
// loss backward: every block's saved tensors, the logits and dlogits side by side.
void expect_gpt2(std::int64_t S, std::int64_t expected_max_batch) {
  SCOPED_TRACE(S);
  const Bytes H = 768, A = 12, L = 12, V = 50257;
  const Bytes P = kGpt2Params + std::max<Bytes>(0, S - 1024) * H;
  const Breakdown b = analyze(config("gpt2", S), kOverhead);
  EXPECT_EQ(b.moment, "ce.bwd");

  EXPECT_EQ(b.component(MemoryComponent::weights), 2 * P);
  EXPECT_EQ(b.component(MemoryComponent::master_weights), 4 * P);
  EXPECT_EQ(b.component(MemoryComponent::optimizer_state), 8 * P);
  EXPECT_EQ(b.component(MemoryComponent::gradients), 0);  // no parameter gradient is written yet
  EXPECT_EQ(b.component(MemoryComponent::cuda_context), 512 * MiB);
  EXPECT_EQ(b.component(MemoryComponent::gemm_workspace), 32 * MiB);
  const Bytes fixed = 14 * P + kContextAndWorkspace;
  EXPECT_EQ(b.fixed_total(), fixed);

  // Per block and token, 2 bytes each: x_in, ln1.out, qkv (3H), attn.y, x_mid, ln2.out, fc.out
  // (4H), gelu.out (4H) = 16H elements; flash adds its fp32 log-sum-exp per head.
  const Bytes saved = L * S * (2 * 16 * H + 4 * A);
  const Bytes stats = L * S * 2 * 8;       // two layer norms, fp32 mean and rstd per row
  const Bytes logits = 2 * S * V + 4 * S;  // logits and the fp32 log-sum-exp of the loss
  const Bytes dlogits = 2 * S * V;
  // Outside the blocks: the last block's output and the final norm's output and statistics.
  EXPECT_EQ(b.component(MemoryComponent::saved_activations), saved + 2 * S * H + 2 * S * H);
  EXPECT_EQ(b.component(MemoryComponent::norm_statistics), stats + 8 * S);
  EXPECT_EQ(b.component(MemoryComponent::logits_and_loss), logits);
  EXPECT_EQ(b.component(MemoryComponent::backward_transient), dlogits);
  EXPECT_EQ(b.component(MemoryComponent::tokens_and_targets), 8 * S);
  const Bytes per_sample = saved + stats + 2 * S * H + 2 * S * H + 8 * S + logits + dlogits + 8 * S;
  EXPECT_EQ(b.per_sample_total(), per_sample);

  EXPECT_EQ(b.peak(3), fixed + 3 * per_sample);
  EXPECT_EQ(b.max_batch(kH100), (kH100 - fixed) / per_sample);
  EXPECT_EQ(b.max_batch(kH100), expected_max_batch);
}

TEST(EstimateGpt2, Seq1024) {
  // fixed 14 * 124439808 + 544 MiB = 2312582656; per sample 511795200;
  // (85520809984 - 2312582656) / 511795200 = 162.6.
  expect_gpt2(1024, 162);
}

TEST(EstimateGpt2, Seq4096) {
  // P = 126799104: fixed 14 * P + 544 MiB = 2345612800; per sample 2047180800 (1.91 GiB);
  // (85520809984 - 2345612800) / 2047180800 = 40.6.
  expect_gpt2(4096, 40);
}

// llama2-7b, bf16, flash, adamw: the model state alone (16 bytes per parameter, 100 GiB) is larger
// than the card, so the estimate is 0; the breakdown still names where the bytes go.
void expect_llama2(std::int64_t S) {
  SCOPED_TRACE(S);
  const Bytes H = 4096, A = 32, L = 32, V = 32000, F = 11008, P = kLlama2Params;
  const Breakdown b = analyze(config("llama2-7b", S), kOverhead);
  EXPECT_EQ(b.moment, "ce.bwd");

  // Per block and token, 2 bytes each: x_in, norm1.out, qkv_rot (3H), attn.y, x_mid, norm2.out,
  // gate, up and swiglu (3F); fp32 log-sum-exp per head; rms norms keep one fp32 rstd per row.
  const Bytes saved = L * S * (2 * (8 * H + 3 * F) + 4 * A);
  const Bytes stats = L * S * 2 * 4;
  // Outside the blocks: the last block's output and the final norm's output and statistics.
  EXPECT_EQ(b.component(MemoryComponent::saved_activations), saved + 2 * S * H + 2 * S * H);
  EXPECT_EQ(b.component(MemoryComponent::norm_statistics), stats + 4 * S);

  const Bytes fixed = 14 * P + kContextAndWorkspace;
  const Bytes ce =
      saved + stats + 2 * S * H + (2 * S * H + 4 * S) + (2 * S * V + 4 * S) + 2 * S * V + 8 * S;
  EXPECT_EQ(b.fixed_total(), fixed);
  EXPECT_EQ(b.per_sample_total(), ce);

  // The lm head backward frees logits and lse, writes its V x H gradient and dx of the final norm.
  const Bytes lm_fixed = fixed + 2 * V * H;
  const Bytes lm = ce - (2 * S * V + 4 * S) + 2 * S * H;
  // The embedding backward: every gradient (16 bytes per parameter in all) and the GEMM workspace,
  // where it sorts the rows by token; only the tokens and the gradient of the embedding output
  // per sample.
  const Bytes end_fixed = 16 * P + kContextAndWorkspace;
  const Bytes end = 8 * S + 2 * S * H;
  const Moment* lm_head = find_moment(b, "lm_head.bwd");
  ASSERT_NE(lm_head, nullptr);
  EXPECT_EQ(lm_head->fixed, lm_fixed);
  EXPECT_EQ(lm_head->per_sample, lm);

  for (std::int64_t batch : {1, 2, 8}) {
    SCOPED_TRACE(batch);
    EXPECT_EQ(b.peak(batch),
              std::max({fixed + batch * ce, lm_fixed + batch * lm, end_fixed + batch * end}));
  }
  EXPECT_GT(fixed, kH100);
  EXPECT_EQ(b.max_batch(kH100), 0);
  // On a 200 GiB card each moment bounds the batch; the tightest one wins.
  const Bytes big = 200 * GiB;
  EXPECT_EQ(b.max_batch(big),
            std::min({(big - fixed) / ce, (big - lm_fixed) / lm, (big - end_fixed) / end}));
}

TEST(EstimateLlama2, Seq1024) {
  expect_llama2(1024);
}
TEST(EstimateLlama2, Seq4096) {
  expect_llama2(4096);
}

// Korthikanti et al.: a GPT block in 16-bit with dropout and eager attention saves
// s*b*h*(34 + 5*a*s/h) bytes. The fp32 layer norm statistics (2 norms x 8 bytes per row) are
// outside that count and reported as "norm statistics".
TEST(EstimateKorthikanti, GptBlockSavedActivations) {
  for (Precision p : {Precision::bf16, Precision::fp16})
    for (std::int64_t S : {512, 1024}) {
      SCOPED_TRACE(S);
      RunConfig cfg = config("gpt2", S);
      cfg.dtype = p;
      cfg.attention = Attention::eager;
      cfg.dropout = 0.1;
      const Bytes s = S, h = 768, a = 12, L = 12;
      const Breakdown b = analyze(cfg, kOverhead);
      ASSERT_EQ(b.moment, "ce.bwd");
      // s*h*(34 + 5*a*s/h) = 34*s*h + 5*a*s*s, exact in integers; outside the blocks the last
      // block's output and the final norm's output (2sh each) and statistics (8s).
      EXPECT_EQ(b.component(MemoryComponent::saved_activations),
                L * (34 * s * h + 5 * a * s * s) + 4 * s * h);
      EXPECT_EQ(b.component(MemoryComponent::norm_statistics), L * s * 16 + 8 * s);
      // Embedding dropout keeps one more 1-byte mask of the block input's size.
      EXPECT_EQ(b.component(MemoryComponent::embedding_dropout_mask), s * h);
    }
}

TEST(EstimateRecompute, SelectiveRemovesTheSquareTerm) {
  RunConfig cfg = config("gpt2", 1024);
  cfg.attention = Attention::eager;
  cfg.dropout = 0.1;
  const Breakdown none = analyze(cfg, kOverhead);
  cfg.recompute = Recompute::selective;
  const Breakdown selective = analyze(cfg, kOverhead);
  const Bytes s = 1024, h = 768, a = 12, L = 12;
  ASSERT_EQ(selective.moment, "ce.bwd");
  EXPECT_EQ(none.component(MemoryComponent::saved_activations) -
                selective.component(MemoryComponent::saved_activations),
            L * 5 * a * s * s);
  EXPECT_EQ(selective.component(MemoryComponent::saved_activations), L * 34 * s * h + 4 * s * h);
}

TEST(EstimateRecompute, FullKeepsBlockInputsAndReplaysOneBlock) {
  const Bytes S = 1024, H = 4096, A = 32, L = 32, F = 11008, V = 32000;
  RunConfig cfg = config("llama2-7b", S);
  cfg.recompute = Recompute::full;
  const Breakdown b = analyze(cfg, kOverhead);
  // Only the block inputs are saved: 2sbh per layer. The peak is inside the top block's backward
  // once the swiglu gradient is formed (down projection done, its input freed).
  EXPECT_EQ(b.moment, "layer31.mlp.swiglu.bwd");
  EXPECT_EQ(b.component(MemoryComponent::saved_activations), L * 2 * S * H);
  // The replayed block minus what its backward already freed (swiglu.out): norm1.out, qkv_rot (3H),
  // attn.y, x_mid, norm2.out, gate, up (2F) in bf16; two fp32 rstd; the fp32 lse per head.
  EXPECT_EQ(b.component(MemoryComponent::recomputed_activations),
            S * (2 * (7 * H + 2 * F) + 2 * 4 + 4 * A));
  // Incoming dx, d(swiglu), d(gate), d(up).
  EXPECT_EQ(b.component(MemoryComponent::backward_transient), S * 2 * (H + 3 * F));
  // Written so far: lm head, final norm, and the block's down projection.
  EXPECT_EQ(b.component(MemoryComponent::gradients), 2 * (V * H + H + F * H));

  // gpt2: the logits still dominate, and the saved part is exactly 2sbh per layer (and the two
  // outside).
  RunConfig gpt = config("gpt2", S);
  gpt.recompute = Recompute::full;
  EXPECT_EQ(analyze(gpt, kOverhead).component(MemoryComponent::saved_activations),
            (12 + 2) * 2 * S * 768);
}

TEST(EstimateAttention, FlashHasNoSquareTerm) {
  const Bytes S = 1024, A = 12, L = 12;
  RunConfig cfg = config("gpt2", S);
  cfg.attention = Attention::eager;
  const Bytes eager = analyze(cfg, kOverhead).component(MemoryComponent::saved_activations);
  cfg.attention = Attention::flash;
  const Bytes flash = analyze(cfg, kOverhead).component(MemoryComponent::saved_activations);
  // Eager keeps the softmax output [A, S, S] in bf16; flash keeps an fp32 lse [A, S] instead.
  EXPECT_EQ(eager - flash, L * (2 * A * S * S - 4 * A * S));
  // Without an S x S term the saved bytes are linear in the sequence.
  cfg.seq = 2 * S;
  EXPECT_EQ(analyze(cfg, kOverhead).component(MemoryComponent::saved_activations), 2 * flash);
}

// Model state at the optimizer step, where every gradient is live: 16 bytes per parameter for
// adamw both in fp32 (4 + 4 + 4 + 4) and in bf16 (2 + 2 + 4 master + 4 + 4).
TEST(EstimateModelState, AdamwIsSixteenBytesPerParameterInFp32AndBf16) {
  for (Precision p : {Precision::fp32, Precision::tf32, Precision::bf16, Precision::fp16}) {
    SCOPED_TRACE(to_string(p));
    RunConfig cfg = config("gpt2", 1024);
    cfg.dtype = p;
    const Breakdown b = analyze(cfg, kOverhead);
    const Moment* step = find_moment(b, last_op(cfg));
    ASSERT_NE(step, nullptr);
    EXPECT_EQ(step->fixed, 16 * kGpt2Params + 512 * MiB);  // the workspace is gone by then
    EXPECT_EQ(step->per_sample, 8 * 1024);                 // tokens and targets
    const bool mixed = p == Precision::bf16 || p == Precision::fp16;
    EXPECT_EQ(b.component(MemoryComponent::weights), (mixed ? 2 : 4) * kGpt2Params);
    EXPECT_EQ(b.component(MemoryComponent::master_weights), mixed ? 4 * kGpt2Params : 0);
    EXPECT_EQ(b.component(MemoryComponent::optimizer_state), 8 * kGpt2Params);
  }
}

TEST(EstimateModelState, SgdAndNoOptimizer) {
  RunConfig cfg = config("gpt2", 1024);
  cfg.optimizer = Optimizer::sgd;
  Breakdown b = analyze(cfg, kOverhead);
  // bf16 weight 2 + grad 2 + fp32 master 4 + fp32 momentum 4.
  EXPECT_EQ(b.component(MemoryComponent::optimizer_state), 4 * kGpt2Params);
  ASSERT_NE(find_moment(b, last_op(cfg)), nullptr);
  EXPECT_EQ(find_moment(b, last_op(cfg))->fixed, 12 * kGpt2Params + 512 * MiB);
  EXPECT_EQ(b.model_state, 12 * kGpt2Params);  // the same without the context

  // Without an optimizer there is no step, so no master copy either: weight 2 + grad 2.
  cfg.optimizer = Optimizer::none;
  b = analyze(cfg, kOverhead);
  EXPECT_EQ(b.component(MemoryComponent::optimizer_state), 0);
  EXPECT_EQ(b.component(MemoryComponent::master_weights), 0);
  // Its last op is the embedding backward, whose row sums still use the 32 MiB workspace.
  ASSERT_NE(find_moment(b, last_op(cfg)), nullptr);
  EXPECT_EQ(find_moment(b, last_op(cfg))->fixed, 4 * kGpt2Params + 512 * MiB + 32 * MiB);
  EXPECT_EQ(b.model_state, 4 * kGpt2Params);

  cfg.dtype = Precision::fp32;
  cfg.optimizer = Optimizer::sgd;
  b = analyze(cfg, kOverhead);
  ASSERT_NE(find_moment(b, last_op(cfg)), nullptr);
  EXPECT_EQ(find_moment(b, last_op(cfg))->fixed, 12 * kGpt2Params + 512 * MiB);
}

TEST(EstimateBreakdown, MaxBatchIsTheFloorAndZeroWhenFixedDoesNotFit) {
  Breakdown b;
  b.fixed = {{MemoryComponent::weights, 10}};
  b.per_sample = {{MemoryComponent::saved_activations, 3}};
  EXPECT_EQ(b.peak(4), 22);
  EXPECT_EQ(b.max_batch(22), 4);
  EXPECT_EQ(b.max_batch(24), 4);
  EXPECT_EQ(b.max_batch(25), 5);
  EXPECT_EQ(b.max_batch(12), 0);  // the fixed part fits, one sample does not
  EXPECT_EQ(b.max_batch(10), 0);
  EXPECT_EQ(b.max_batch(9), 0);  // the fixed part alone does not fit
  EXPECT_EQ(b.component(MemoryComponent::weights), 10);
  EXPECT_EQ(b.component(MemoryComponent::gradients), 0);  // absent

  // A later moment with more fixed bytes bounds small batches: peak is the larger line, max batch
  // the smaller bound.
  b.other_moments = {{"end of backward", 20, 1}};
  EXPECT_EQ(b.peak(1), 21);        // max(13, 21)
  EXPECT_EQ(b.peak(10), 40);       // max(40, 30)
  EXPECT_EQ(b.max_batch(22), 2);   // min(4, 2)
  EXPECT_EQ(b.max_batch(40), 10);  // min(10, 20)
  EXPECT_EQ(b.max_batch(19), 0);   // the later moment's fixed part does not fit
}

// The shapes the formulas cannot take never reach them: validate() refuses them first, once per
// configuration, and analyze() takes what it let through.
TEST(EstimateBreakdown, InvalidShapesAreRefusedBeforeTheEstimate) {
  RunConfig cfg = config("gpt2", 1024);
  cfg.model.heads = 5;  // does not divide 768
  EXPECT_THROW(validate(cfg), UsageError);
  cfg = config("gpt2", std::int64_t{1} << 40);  // S x S attention bytes overflow 64 bits
  EXPECT_THROW(validate(cfg), UsageError);
  cfg.attention = Attention::eager;  // the estimate's own products are checked too
  EXPECT_THROW(analyze(cfg, kOverhead), UsageError);
}

TEST(EstimateBreakdown, IndependentOfTheConfiguredBatch) {
  RunConfig cfg = config("llama2-7b", 2048);
  const Breakdown one = analyze(cfg, kOverhead);
  cfg.batch = 7;
  const Breakdown seven = analyze(cfg, kOverhead);
  EXPECT_EQ(one.fixed_total(), seven.fixed_total());
  EXPECT_EQ(one.per_sample_total(), seven.per_sample_total());
  EXPECT_EQ(one.peak(7), seven.peak(7));
}

TEST(EstimateMonotone, Llama2MaxBatchDoesNotGrowWithSequence) {
  bool some_fit = false;
  for (Optimizer opt : {Optimizer::adamw, Optimizer::sgd, Optimizer::none})
    for (Attention att : {Attention::eager, Attention::flash})
      for (Recompute rc : {Recompute::none, Recompute::selective, Recompute::full}) {
        SCOPED_TRACE(std::string(to_string(opt)) + " " + std::string(to_string(att)) + " " +
                     std::string(to_string(rc)));
        std::int64_t previous = std::numeric_limits<std::int64_t>::max();
        for (std::int64_t S = 512; S <= 8192; S += 512) {
          RunConfig cfg = config("llama2-7b", S);
          cfg.optimizer = opt;
          cfg.attention = att;
          cfg.recompute = rc;
          const std::int64_t batch = analyze(cfg, kOverhead).max_batch(kH100);
          EXPECT_LE(batch, previous) << "seq " << S;
          previous = batch;
          some_fit = some_fit || batch > 0;
        }
      }
  // Without optimizer state (8 bytes per parameter) a few samples fit at short sequences.
  EXPECT_TRUE(some_fit);
}

// The attention core alone: inputs qkv [S, 3H] and dout [S, H]; flash keeps attn.y and the fp32 lse
// and its backward writes dqkv next to fp32 scratch: the dq accumulator [A, S, D] and the row sums
// [A, S]. No weights, no GEMM.
TEST(EstimateScope, FlashAttentionCore) {
  const Bytes S = 1024, H = 768, A = 12;
  RunConfig cfg = config("gpt2", S);
  cfg.scope = Scope::attention;
  const Breakdown b = analyze(cfg, kOverhead);
  EXPECT_EQ(b.moment, "layer0.attn.flash.bwd");
  // The context and the 256 bytes the fused backward's engine keeps whatever the batch.
  EXPECT_EQ(b.fixed_total(), 512 * MiB + 256);
  EXPECT_EQ(b.component(MemoryComponent::scope_inputs), S * 2 * (3 * H + H));
  EXPECT_EQ(b.component(MemoryComponent::saved_activations), S * (2 * H + 4 * A));
  EXPECT_EQ(b.component(MemoryComponent::backward_transient), S * 2 * 3 * H);  // dqkv
  // The scratch: the fp32 dq accumulator and row sums, two int32 sequence lengths, the engine's.
  EXPECT_EQ(b.component(MemoryComponent::gemm_workspace), S * (4 * H + 4 * A) + 8 + 256);
}

// One gpt block: its parameters with the full recipe, and the block input and output gradient as
// inputs of the step.
TEST(EstimateScope, LayerHoldsOneBlocksState) {
  const Bytes H = 768, F = 3072;
  const Bytes block = 2 * H + 3 * H * H + 3 * H + H * H + H + 2 * H + F * H + F + H * F + H;
  RunConfig cfg = config("gpt2", 1024);
  cfg.scope = Scope::layer;
  const Breakdown b = analyze(cfg, kOverhead);
  EXPECT_EQ(b.component(MemoryComponent::weights), 2 * block);
  EXPECT_EQ(b.component(MemoryComponent::master_weights), 4 * block);
  EXPECT_EQ(b.component(MemoryComponent::optimizer_state), 8 * block);
  EXPECT_EQ(b.component(MemoryComponent::scope_inputs), 1024 * 2 * 2 * H);
  const Moment* step = find_moment(b, last_op(cfg));
  ASSERT_NE(step, nullptr);
  // By the optimizer step the workspace has gone with the last GEMM; the inputs remain.
  EXPECT_EQ(step->fixed, 16 * block + 512 * MiB);
  EXPECT_EQ(step->per_sample, 1024 * 2 * 2 * H);
}

// The caching allocator's share of a lean step (selective recompute; with eager attention the S x S
// matrices are the largest tensors and come and go in every block) is the replay of the step's own
// allocations: at the sim's max batch and the batch after it, the estimate is what the sim's
// allocator reserved there, to the byte, and it says the same max batch.
TEST(Estimate, AllocatorShareOfALeanStepIsItsReplay) {
  for (Attention att : {Attention::eager, Attention::flash}) {
    RunConfig cfg = config("gpt2", 1024);
    cfg.allocator = AllocatorKind::caching;
    cfg.attention = att;
    cfg.recompute = Recompute::selective;
    cfg.device = parse_device("sim:h100-80gb");
    SCOPED_TRACE(to_string(att));
    const Device device = make_device(cfg);
    const Measurement m = measure(cfg, device, {});
    const std::int64_t max = m.search.max_batch;
    ASSERT_GT(max, 0);
    EXPECT_EQ(m.est_max_batch, max);
    ASSERT_NE(m.at_max(), nullptr);
    EXPECT_EQ(m.estimate.peak(max), m.at_max()->device_peak);
    ASSERT_TRUE(m.next_needed.has_value());
    EXPECT_EQ(m.estimate.peak(max + 1), m.next_needed->device_peak);

    // The share is what the allocator reserves beyond the tensors.
    const DeviceOverhead overhead{device.info.fixed_overhead, device.info.gemm_workspace,
                                  device.info.total, false, false};
    const Breakdown tensors = analyze(cfg, overhead);
    EXPECT_EQ(tensors.component(MemoryComponent::allocator_fragmentation), 0);
    const Bytes share = m.estimate.peak(max) - tensors.peak(max);
    EXPECT_GT(share, 0);
    EXPECT_LT(share, m.estimate.peak(max) / 20);
  }
}

// The bytes live on the device while op `name` of `program` runs (paged state is elsewhere).
Bytes live_at(const Program& program, const std::string& name) {
  const Liveness live = compute_liveness(program);
  int at = -1;
  for (std::size_t i = 0; i < program.ops.size(); ++i)
    if (program.ops[i].name.str() == name) at = static_cast<int>(i);
  EXPECT_GE(at, 0) << name;
  Bytes total = 0;
  for (const Tensor& t : program.tensors)
    if (t.on_device() && live.alloc_at[static_cast<std::size_t>(t.id)] <= at &&
        live.free_after[static_cast<std::size_t>(t.id)] >= at)
      total += t.bytes;
  return total;
}

// The model is the step program's live tensor bytes, read off it once as lines in the batch: for
// every architecture, scope, precision, attention, recompute mode, optimizer and dropout, at
// several batches, the estimate without the allocator's share minus the device context equals the
// program's tensor peak to the byte; and the components at the peak moment sum to the bytes live
// there.
TEST(EstimateAgainstProgram, PeakEqualsTheProgramsLiveTensorPeak) {
  const DeviceOverhead overhead{512 * MiB, 4 * MiB, 0, false, false};
  int compared = 0;
  for (std::string_view preset : {"tiny", "tiny-llama", "gpt2"})
    for (std::int64_t S : {32, 256})
      for (Precision p : {Precision::bf16, Precision::fp32})
        for (Attention att : {Attention::eager, Attention::flash})
          for (Recompute rc : {Recompute::none, Recompute::selective, Recompute::full})
            for (Optimizer opt : {Optimizer::adamw, Optimizer::sgd, Optimizer::none})
              for (double dropout : {0.0, 0.1})
                for (Scope scope : {Scope::model, Scope::layer, Scope::attention, Scope::mlp}) {
                  RunConfig cfg = config(preset, S);
                  cfg.dtype = p;
                  cfg.attention = att;
                  cfg.recompute = rc;
                  cfg.optimizer = opt;
                  cfg.dropout = dropout;
                  cfg.scope = scope;
                  const Breakdown b = analyze(cfg, overhead);
                  for (std::int64_t batch : {1, 5}) {
                    cfg.batch = batch;
                    const Program program = build_program(cfg, overhead.gemm_workspace);
                    const LiveProfile live = live_profile(program, compute_liveness(program));
                    ASSERT_EQ(b.peak(batch) - overhead.context, live.peak)
                        << preset << " S=" << S << " " << to_string(p) << " " << to_string(att)
                        << " " << to_string(rc) << " " << to_string(opt) << " dropout " << dropout
                        << " " << to_string(scope) << " B=" << batch << ": estimate " << b.moment
                        << ", program peak at op " << live.peak_op;
                    ASSERT_EQ(b.fixed_total() + batch * b.per_sample_total() - overhead.context,
                              live_at(program, b.moment))
                        << b.moment;
                    ++compared;
                  }
                }
  EXPECT_EQ(compared, 3 * 2 * 2 * 2 * 3 * 3 * 2 * 4 * 2);
}

}  // namespace
}  // namespace vrambench
