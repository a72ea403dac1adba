// The hf builder (HfBuilder): what PyTorch eager autograd allocates when it runs Hugging Face
// transformers' model code for one training step, written by part over the parameters and linears
// of hf_linears.h: the norms (build_hf_norms.cpp), the attention (build_hf_attention.cpp), the
// MLPs (build_hf_mlp.cpp), one function per decoder block variant (build_hf_blocks.cpp), the
// model around the blocks and its loss (build_hf_model.cpp) and the optimizer
// (build_hf_optimizer.cpp).
//
// The kernels are the lean program's (a kernel's operands are the values its backward reads). What
// the framework keeps besides them, or in another form, is listed in Op::held: autograd's saved
// pieces of composite functions (the python tanh-GELU, RMSNorm's fp32 upcast, SiLU's output),
// reshape copies, key/value caches, dropout noise, casts. Where the framework keeps the same bytes
// in other storages than the kernel's operand (gpt2 keeps a query copy and the cached keys and
// values where the kernel keeps the packed q|k|v), the operand stands for them.
#pragma once

#include <optional>
#include <string_view>
#include <utility>
#include <vector>

#include "config/run_config.h"
#include "program/build_common.h"
#include "program/hf_linears.h"
#include "program/program.h"

namespace vrambench::build_hf {

using build_common::DropoutSite;
using build_common::stats_component;

// What a norm's forward made that its backward reads, and what autograd holds beside.
struct HfNormSaved {
  int x = -1;      // what the norm read: its input, or RMSNorm's fp32 copy of it
  int out = -1;    // its output
  int mean = -1;   // layernorm's mean
  int rstd = -1;   // the reciprocal standard deviations
  TensorIds held;  // what its backward releases
};

// What an MoE layer's MLP made in its forward that its backward reads (build_hf_moe.cpp).
struct HfMoeTensors {
  LinearSaved router_saved;
  int logits = -1;  // the router's output
  int probs = -1, scores = -1, index = -1;
  int xs = -1, order = -1, offsets = -1;  // the dispatch's rows, their order, the experts' ends
  int gemm_in = -1;                       // what the gate|up GEMM reads: xs, or its cast
  int w_gate_up = -1, w_down = -1;  // the experts' weights the GEMMs read (LoRA: effective ones)
  int gate_up = -1, act = -1, ys = -1;
  int pairs_perm = -1;                  // the sort's permutation, which scores[perm] saves
  TensorIds gate_up_casts, down_casts;  // an adapter's A and B in the weight's dtype
  TensorIds combine_held;               // what the combine's backward releases
  TensorIds router_held, act_held;      // what the router's and SwiGLU's backward release
  bool in_grad = false, logit_grad = false, gate_up_grad = false, down_grad = false;
};

// What a decoder layer's forward made that its backward reads, and what autograd holds beside.
struct HfBlockTensors {
  int layer = 0;
  int x_in = -1;
  HfNormSaved norm1;
  LinearSaved qkv_saved;
  int qkv = -1;       // c_attn / q|k|v projection output
  int qkv_rot = -1;   // rotary blocks: after rope
  int attn_qkv = -1;  // what attention reads: qkv (gpt) or qkv_rot (llama), or autocast's copy
  int scores = -1, probs = -1, probs_c = -1, probs_drop = -1, probs_mask = -1, values_in = -1;
  int capped = -1;  // attention soft-capping (Gemma 2, eager)
  int y = -1, lse = -1;
  LinearSaved proj_saved;
  int proj_out = -1, proj_drop = -1, proj_mask = -1;
  int qk_normed = -1, qk_rstd = -1;  // qk_norm: what rope reads, and the heads' statistics
  TensorIds qk_held;                 // what the q/k norm's backward releases
  HfNormSaved post_attn, post_mlp;   // sandwich norms: of the attention's and the MLP's outputs
  int x_mid = -1;
  HfNormSaved norm2;
  LinearSaved fc_saved, up_saved, out_saved;
  int fc_out = -1, gelu_in = -1, gelu_out = -1;  // gpt
  int up_out = -1, swiglu_out = -1;              // llama (fc_out is the gate's output)
  int mlp_out = -1, mlp_drop = -1, mlp_mask = -1;
  int x_out = -1;
  // Which of them require grad (all under full training; under fine-tuning what an adapter or a
  // checkpointed input reaches): the input, q|k|v, the attention's output projection, the
  // block's middle, the MLP's first linears (gate / fc, up), its activation and its output.
  bool x_in_grad = true, qkv_grad = true, proj_grad = true, x_mid_grad = true, fc_grad = true,
       up_grad = true, act_grad = true, mlp_grad = true;
  // Held by the backward ops that release them.
  TensorIds gelu_held, swiglu_held, attn_held, qkv_held, proj_held;
  HfMoeTensors moe;  // an MoE layer's MLP
};

// What the model's head made in the forward that its backward reads.
struct HfHead {
  int x = -1;  // the last block's output
  HfNormSaved final_norm;
  Linear lm;
  LinearSaved lm_saved;
  int head_out = -1;    // the lm head's output: the logits, or soft-capping's input
  int logits_f32 = -1;  // what the loss reads: the logits, or their fp32 copy
  int lse = -1;
  int tied_grad = -1;  // a tied lm head's gradient, which the embedding's joins (head_bwd)
  // A preference trainer's fused head (build_hf_preference.cpp): the per-token log-probabilities,
  // their log-sum-exps and entropies, which its backward reads, and what it reads x from: the
  // copy of the final norm's output without each row's last position, or that output itself.
  int logp = -1, logz = -1, entropy = -1, xs = -1;
  int targets = -1;
};

// A preference trainer's step beside the policy's forward (build_hf_preference.cpp): the
// reference's parameters (a frozen copy, or the policy's with the adapters off), KTO's KL inputs,
// and the per-token log-probabilities the loss reads.
struct HfPreference {
  ModelParams ref_params;
  std::vector<BlockWeights> ref_weights;
  int kl_tokens = -1, kl_targets = -1;  // kto: the mismatched pairs' sequences
  int kl = -1;                          // kto: the policy's on them, under no_grad
  int ref = -1, ref_kl = -1;            // the reference's (or precomputed inputs)
  TensorIds loss_in;                    // what the loss reads
};

// What the embeddings made in the forward that their backward reads.
struct HfEmbeddings {
  int x0 = -1;        // the first block's input
  int out = -1;       // the lookup's output: x0, or the dropout's input
  int mask = -1;      // the embedding dropout's mask
  int tokens = -1;    // gpt: the token embeddings before the position embeddings are added
  bool leaf = false;  // the token embeddings are a leaf that requires grad (fine-tuning)
};

class HfBuilder : private HfLinears {
 public:
  HfBuilder(const RunConfig& cfg, Bytes gemm_workspace, const HfOptions& options);
  Program build();

 private:
  // ---- dtypes on the device -----------------------------------------------------------------

  // Dropout noise: CUDA's fused dropout keeps a byte mask; on the CPU, dropout multiplies by a
  // noise tensor of the input's dtype and keeps that.
  DType mask_dtype(int x) const { return cpu_ ? dtype_of(x) : DType::u8; }
  // Norm statistics: fp32 on CUDA; on the CPU, layer_norm returns them in the input's dtype.
  DType stats_dtype(int x) const { return cpu_ ? dtype_of(x) : DType::f32; }
  // A pass that keeps nothing (what does not require grad saves nothing), or `pass`.
  static Pass keeping(const Pass& pass, bool grad) {
    Pass p = pass;
    p.keep_block = p.keep_block && grad;
    return p;
  }

  // ---- norms (build_hf_norms.cpp) -----------------------------------------------------------
  HfNormSaved norm_fwd(const Norm& norm, int x, const Pass& pass, int layer, bool x_grad);
  HfNormSaved layer_norm_fwd(const Norm& norm, int x, const Pass& pass, int layer, bool x_grad);
  HfNormSaved rms_norm_fwd(const Norm& norm, int x, const Pass& pass, int layer, bool x_grad);
  void rms_pieces(const Name& name, const Dims& dims, DType x_dtype, Role out_role,
                  const Pass& pass, bool trainable, TensorIds& op_held, TensorIds& held);
  HfNormSaved post_norm_fwd(const Norm& norm, int x, const Pass& pass, int layer, bool x_grad);
  int qk_norm_fwd(const Name& pre, int l, const BlockWeights& w, const Pass& pass,
                  const Pass& attn_pass, HfBlockTensors& b);
  void norm_bwd(const Norm& norm, const HfNormSaved& s, int dy, int x, int dx, int layer);
  int post_norm_bwd(const Norm& norm, const HfNormSaved& s, int x, int dresidual, int layer);
  int residual_bwd(const Norm& norm, const HfNormSaved& s, int x, int dresidual, int dnorm_out,
                   const Name& add, int layer);
  int qk_norm_bwd(const Name& pre, int l, const BlockWeights& w, const HfBlockTensors& b,
                  int dnormed);

  // ---- attention (build_hf_attention.cpp) ---------------------------------------------------
  void qkv_fwd(const Name& pre, int l, const BlockWeights& w, const Pass& pass,
               const Pass& attn_pass, bool keep, HfBlockTensors& b);
  void gpt2_attention_fwd(const Name& pre, int l, const BlockWeights& w, const Pass& pass,
                          HfBlockTensors& b);
  void rotary_attention_fwd(const Name& pre, int l, const BlockWeights& w, const Pass& pass,
                            HfBlockTensors& b);
  int rope_fwd(const Name& pre, int l, int x, const Pass& pass, const Pass& attn_pass,
               HfBlockTensors& b);
  void attention_fwd(const Name& pre, int l, int qkv, const Pass& pass, HfBlockTensors& b);
  void eager_attention_fwd(const Name& pre, int l, int qkv, const Pass& pass,
                           const TensorIds& fwd_held, HfBlockTensors& b);
  void proj_fwd(int l, const BlockWeights& w, const Pass& pass, HfBlockTensors& b);
  int attention_branch_bwd(const HfBlockTensors& b, const BlockWeights& w, int dproj);
  int attention_bwd(const Name& pre, int l, int qkv, const HfBlockTensors& b, int dy);
  int rope_bwd(const Name& pre, int l, const BlockWeights& w, const HfBlockTensors& b, int dqkv);

  // ---- MLPs (build_hf_mlp.cpp) --------------------------------------------------------------
  void gelu_mlp_fwd(const Name& pre, int l, const BlockWeights& w, const Pass& pass,
                    HfBlockTensors& b);
  void gated_mlp_fwd(const Name& pre, int l, const BlockWeights& w, const Pass& pass,
                     HfBlockTensors& b);
  int gelu_mlp_bwd(const HfBlockTensors& b, const BlockWeights& w, int dmlp);
  int gated_mlp_bwd(const HfBlockTensors& b, const BlockWeights& w, int dmlp);

  // ---- an MoE layer's MLP (build_hf_moe.cpp) ------------------------------------------------
  void moe_mlp_fwd(const Name& pre, int l, const BlockWeights& w, const Pass& pass,
                   HfBlockTensors& b);
  int moe_mlp_bwd(const HfBlockTensors& b, const BlockWeights& w, int dmlp);
  void aux_loss_fwd(const std::vector<HfBlockTensors>& blocks);
  void aux_loss_bwd(const std::vector<HfBlockTensors>& blocks);

  // ---- decoder blocks (build_hf_blocks.cpp) -------------------------------------------------
  HfBlockTensors block_fwd(int l, int x_in, const BlockWeights& w, const Pass& pass,
                           bool x_in_grad);
  int block_bwd(const HfBlockTensors& b, const BlockWeights& w, int dx_out);
  HfBlockTensors gpt2_block_fwd(int l, int x_in, const BlockWeights& w, const Pass& pass,
                                bool x_in_grad);
  int gpt2_block_bwd(const HfBlockTensors& b, const BlockWeights& w, int dx_out);
  HfBlockTensors llama_block_fwd(int l, int x_in, const BlockWeights& w, const Pass& pass,
                                 bool x_in_grad);
  int llama_block_bwd(const HfBlockTensors& b, const BlockWeights& w, int dx_out);
  HfBlockTensors sandwich_block_fwd(int l, int x_in, const BlockWeights& w, const Pass& pass,
                                    bool x_in_grad);
  int sandwich_block_bwd(const HfBlockTensors& b, const BlockWeights& w, int dx_out);
  HfBlockTensors block_start(int l, int x_in, const BlockWeights& w, bool x_in_grad) const;
  int mid_residual_fwd(const HfBlockTensors& b, int branch, const Pass& pass);
  int out_residual_fwd(const HfBlockTensors& b, int branch, const Pass& pass);
  int proj_dropout_fwd(int l, const BlockWeights& w, const Pass& pass, HfBlockTensors& b);
  int mlp_dropout_fwd(int l, const BlockWeights& w, const Pass& pass, HfBlockTensors& b);
  int proj_branch_grad(const HfBlockTensors& b, const BlockWeights& w, int dx_mid);
  int mlp_branch_grad(const HfBlockTensors& b, const BlockWeights& w, int dx_out);
  int block_input_grad(const HfBlockTensors& b, const BlockWeights& w, int dx_mid, int dnorm1_out);
  int branch_grad(int dx, int out, int drop, int mask, const Name& cast, const Name& site,
                  int layer, DropoutSite where);

  // ---- the model (build_hf_model.cpp) -------------------------------------------------------
  void build_model();
  HfEmbeddings embeddings_fwd(int tokens, const ModelParams& params, bool x0_grad,
                              const Pass& pass = Pass{});
  HfHead head_fwd(int x, bool x_grad, const ModelParams& params, int targets);
  int head_bwd(HfHead& head, const ModelParams& params, int targets);
  void embeddings_bwd(int dx, int tokens, const ModelParams& params, const HfEmbeddings& e,
                      int lm_head_grad);

  // ---- preference training (build_hf_preference.cpp) ---------------------------------------
  HfPreference preference_setup(const ModelWeights& description, const ModelParams& params,
                                const std::vector<BlockWeights>& weights);
  int no_grad_forward(std::string_view suffix, int tokens, int targets, const ModelParams& params,
                      const std::vector<BlockWeights>& weights);
  HfHead logprob_head_fwd(int x, bool x_grad, const ModelParams& params, int targets,
                          const Pass& pass);
  std::optional<MemoryComponent> head_component(const Pass& pass) const;
  std::pair<Dim, std::int64_t> logprob_tile() const;
  TensorIds logprob_scratch(const Name& name, int hidden, const Pass& pass);
  TensorIds cpu_fold_tiles(const Name& name, const Pass& pass, int count, bool target_mask);
  Op& preference_attrs(Op& o) const;
  void preference_loss_fwd(const HfHead& head, int tokens, int targets, HfPreference& pref);
  int preference_loss_bwd(const HfHead& head, const HfPreference& pref);
  int logprob_head_bwd(HfHead& head, int dlogp, const ModelParams& params);

  // ---- optimizer (build_hf_optimizer.cpp) ---------------------------------------------------
  void add_optimizer();

  bool eager_ = false, dropout_ = false, ckpt_ = false;
  bool fused_ = false;          // Phi-3: qkv_proj and gate_up_proj
  bool resid_dropout_ = false;  // dropout on both branches' outputs (gpt2, Phi-3)
  float loss_scale_ = 1.0f;
  int mask_ = -1, cos_sin_ = -1, logits_ = -1, log_probs_ = -1;
  int sliding_mask_ = -1;  // sdpa's boolean sliding-window mask, where a layer gets one
  // The load-balancing loss: each MoE layer's softmax of its router logits, kept for the loss's
  // backward, the statistics over the layers, and each layer's gradient of its logits, waiting
  // for its backward (-1 where a layer has none).
  std::vector<int> aux_probs_, aux_dlogits_;
  int aux_stats_ = -1;
};

}  // namespace vrambench::build_hf
