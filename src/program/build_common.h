// What the step program builders (build_lean.cpp: lean; hf_builder.h and build_hf_*.cpp: hf)
// share: the step's sizes, a parameter, a forward pass, how tensors and ops are written and named,
// and the dropout seeds, so that both frameworks draw the same masks at the same sites.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "config/run_config.h"
#include "core/error.h"
#include "core/quant_layout.h"
#include "core/units.h"
#include "model/weights.h"
#include "program/program.h"

namespace vrambench::build_common {

// A recomputed tensor's name adds it; a recomputed tensor's gradient is named after the original.
inline constexpr std::string_view kRecomputeSuffix = ".recompute";

// What the names of block `layer`'s tensors and ops start with: "layer3.".
inline Name block_prefix(int layer) {
  return Name("layer") + layer + ".";
}

// What a norm's statistics are filed under: norm_statistics, or recomputed_activations when
// recomputed.
inline MemoryComponent stats_component(bool recompute) {
  return recompute ? MemoryComponent::recomputed_activations : MemoryComponent::norm_statistics;
}

// Where a dropout sits; with the layer it gives the seed, so a recompute regenerates the same mask.
enum class DropoutSite : std::uint64_t {
  embedding = 1,
  attn_probs = 2,
  attn_proj = 3,
  mlp_proj = 4,
  lora = 16,  // + the adapter's index in its layer
};

inline std::uint64_t dropout_seed(int layer, DropoutSite site) {
  // splitmix64 of (layer, site): distinct, well-spread seeds for counter-based generators.
  std::uint64_t z = (static_cast<std::uint64_t>(layer + 1) << 8) + static_cast<std::uint64_t>(site);
  z += 0x9E3779B97F4A7C15ull;
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

// A parameter and what the optimizer keeps for it; -1 where the recipe has none. lean: an fp32
// master copy of a 16-bit weight, AdamW's m and v (fp32, or 8-bit codes with their block absmax),
// SGD's momentum; hf: torch's exp_avg, exp_avg_sq and momentum_buffer in the parameter's dtype.
struct Param {
  int w = -1;
  int grad = -1;                     // -1: frozen (fine-tuning's base)
  int master = -1;                   // lean: fp32 master copy (16-bit recipes with an optimizer)
  int m = -1, v = -1;                // adamw
  int m_absmax = -1, v_absmax = -1;  // lean: 8-bit adamw
  int momentum = -1;                 // sgd
  int layer = -1;
  std::int64_t numel = 0;
  bool present() const { return w >= 0; }
  bool trainable() const { return grad >= 0; }
};

// One quantised module of a frozen block linear: rows [row_offset, +rows) of its weight, stored
// as the tensors bitsandbytes allocates (core/quant_layout.h).
struct QuantModule {
  Name name;  // "layer0.attn.q"
  int codes = -1, absmax = -1, absmax2 = -1, offset = -1;
  std::int64_t row_offset = 0, rows = 0, blocks = 0;
};

// One LoRA adapter on columns [col_offset, +out) of a linear's output.
struct Adapter {
  Name name;   // "layer0.attn.q"
  Param a, b;  // A [r, In], B [out, r]
  std::int64_t col_offset = 0, out = 0;
  int index = 0;  // in its layer: the dropout seed
};

// A linear of the step (a block's, or the lm head): its weight, stored whole (trainable under full
// training, frozen under fine-tuning) or as the quantised modules standing for it, its bias, and
// the LoRA adapters on its modules.
struct Linear {
  Name name;   // "layer0.attn.qkv"
  Param w, b;  // w.w is -1 when the weight is stored quantised
  std::vector<QuantModule> quant;
  std::vector<Adapter> lora;
  std::int64_t out = 0, in = 0;
  // An MoE layer's experts: E linears stacked in one weight [E, out, in] (0: a plain linear),
  // each adapter a [E R, in] and b [out, E R] (PEFT's ParamWrapper).
  std::int64_t experts = 0;
  bool trainable() const { return w.trainable(); }
  bool quantized() const { return !quant.empty(); }
  bool present() const { return w.present() || quantized(); }
};

// A norm's parameters: its scale and, for layernorm, its bias. Its ops and tensors are named
// after it ("layer0.ln1", "layer0.ln1.out").
struct Norm {
  Name name;
  Param w, b;
  bool present() const { return w.present(); }
};

// A decoder layer's parameters and linears, each in the slot of its module in the weights
// description (model/weights.h); a slot the model's blocks lack stays absent.
struct BlockWeights {
  Norm norm1;           // gpt: ln1 (weight and bias); llama: attn_norm
  Linear qkv;           // [Q,H], [Q]
  Norm q_norm, k_norm;  // qk_norm: [D] each
  Linear proj;          // attention output projection [H,AD], [H]
  Norm post_attn_norm;  // sandwich_norms: the attention output's norm [H]
  Norm norm2;           // gpt: ln2; llama: mlp_norm
  Norm post_mlp_norm;   // sandwich_norms: the MLP output's norm [H]
  Linear fc;            // gpt: fc [F,H], [F]; llama: gate [F,H]; fused: gate|up [2F,H]
  Linear up;            // llama: up [F,H] (absent where fused)
  Linear out;           // gpt: mlp.proj [H,F], [H]; llama: down [H,F]
  Linear router;        // an MoE layer's: the router [E,H]
  Linear gate_up;       // its experts' gate|up [E,2I,H]
  Linear down;          // its experts' down [E,H,I]
  bool moe() const { return router.present(); }
  // The block as PEFT's disable_adapter() runs it: its base linears alone.
  BlockWeights without_adapters() const {
    BlockWeights w = *this;
    for (Linear* lin : {&w.qkv, &w.proj, &w.fc, &w.up, &w.out, &w.router, &w.gate_up, &w.down})
      lin->lora.clear();
    return w;
  }

  // Files a module's parameters under its slot.
  void set(WeightPart part, Norm norm) {
    switch (part) {
      case WeightPart::norm1:
        norm1 = std::move(norm);
        return;
      case WeightPart::q_norm:
        q_norm = std::move(norm);
        return;
      case WeightPart::k_norm:
        k_norm = std::move(norm);
        return;
      case WeightPart::post_attn_norm:
        post_attn_norm = std::move(norm);
        return;
      case WeightPart::norm2:
        norm2 = std::move(norm);
        return;
      case WeightPart::post_mlp_norm:
        post_mlp_norm = std::move(norm);
        return;
      default:
        throw InternalError("BlockWeights: not a norm of a block");
    }
  }
  void set(WeightPart part, Linear linear) {
    switch (part) {
      case WeightPart::qkv:
        qkv = std::move(linear);
        return;
      case WeightPart::proj:
        proj = std::move(linear);
        return;
      case WeightPart::fc:
        fc = std::move(linear);
        return;
      case WeightPart::up:
        up = std::move(linear);
        return;
      case WeightPart::out:
        out = std::move(linear);
        return;
      case WeightPart::router:
        router = std::move(linear);
        return;
      case WeightPart::experts_gate_up:
        gate_up = std::move(linear);
        return;
      case WeightPart::experts_down:
        down = std::move(linear);
        return;
      default:
        throw InternalError("BlockWeights: not a linear of a block");
    }
  }
};

// The model's parameters outside its blocks.
struct ModelParams {
  Param wte, wpe;   // token and (gpt) position embeddings
  Norm final_norm;  // gpt: ln_f; llama: norm
  Param lm_head;    // the token embedding where tied
};

// A module's own name inside a packed linear ("layer0.attn.q" in "layer0.attn.qkv"), or the
// linear's when it is one module.
inline Name module_name(const Name& linear, LoraModule module, std::size_t count) {
  if (count == 1) return linear;
  const std::string_view peft = lora_module_name(module);  // "q_proj"
  return linear.substr(0, linear.rfind('.') + 1) + Name(peft.substr(0, 1));
}

// TRL's chunked LM head (preference trainers, build_hf_preference.cpp) projects at most this many
// tokens (TOKEN_CHUNK_SIZE) by this many vocabulary columns (_CHUNKED_LOGPROB_CHUNK_SIZE) at once.
inline constexpr std::int64_t kLogprobTileTokens = 4096;
inline constexpr std::int64_t kLogprobTileColumns = 32768;
// Whether the head's tile is full at `batch` (its rows no longer grow with the batch): the
// positions it scores, rows x (S - 1), reach kLogprobTileTokens.
inline bool logprob_tile_full(const RunConfig& cfg, std::int64_t batch) {
  return is_preference(cfg) && batch * rows_per_sample(cfg) * (cfg.seq - 1) >= kLogprobTileTokens;
}

// The step's sizes, as both builders name them (a builder derives from it): batch B, sequence S,
// hidden H, heads A, key/value heads K, head size D, q|k|v width Q, attention output width AD
// (A·D: H unless the model gives its own head size), MLP width F, vocabulary V,
// and M = B * S tokens. B and M are dimensions that hold the batch (program.h, Dim): a shape
// written with them says so.
struct StepShape {
  explicit StepShape(const RunConfig& cfg)
      : B_(checked_mul(cfg.batch, rows_per_sample(cfg), "rows"), rows_per_sample(cfg)),
        S_(cfg.seq),
        H_(cfg.model.hidden),
        A_(cfg.model.heads),
        K_(cfg.model.kv_heads),
        D_(cfg.model.head_dim()),
        Q_(qkv_width(A_, K_, D_)),
        AD_(A_ * D_),
        F_(cfg.model.ffn),
        V_(cfg.model.vocab),
        M_(checked_mul(B_.size, S_, "batch x seq"), S_ * rows_per_sample(cfg)) {}

  Dims bsh() const { return {B_, S_, H_}; }
  Dims bs_ad() const { return {B_, S_, AD_}; }  // the attention's output
  Dims bsf() const { return {B_, S_, F_}; }
  Dims bass() const { return {B_, A_, S_, S_}; }

  Dim B_;
  std::int64_t S_, H_, A_, K_, D_, Q_, AD_, F_, V_;
  Dim M_;
};

// Block l's parameters as the weights description lists them (`modules`, model/weights.h), in
// its order: each norm's by param(name, shape), each linear by linear(name, module). `mlp_only`
// keeps the MLP's linears alone (the lean mlp scope). Both builders lay a block out through it.
template <typename MakeParam, typename MakeLinear>
BlockWeights lay_out_block(const WeightModules& modules, int l, bool mlp_only, MakeParam param,
                           MakeLinear linear) {
  const Name pre = block_prefix(l);
  BlockWeights w;
  for (const WeightModule& module : modules) {
    if (mlp_only && !in_mlp(module.part)) continue;
    const Name name = pre + module.name;
    if (module.kind == WeightKind::linear || module.kind == WeightKind::experts) {
      w.set(module.part, linear(name, module));
      continue;
    }
    Norm norm{name, param(name + ".w", Shape{module.rows}), {}};
    if (module.bias) norm.b = param(name + ".b", Shape{module.rows});
    w.set(module.part, std::move(norm));
  }
  return w;
}

// Parameters of the model outside its blocks (ModelWeights::embeddings or head) into `p`, in
// the description's order, each by param(name, shape).
template <typename MakeParam>
void lay_out_modules(const WeightModules& modules, ModelParams& p, MakeParam param) {
  for (const WeightModule& module : modules) {
    const Name name(module.name);
    switch (module.part) {
      case WeightPart::token_embedding:
        p.wte = param(name, Shape{module.rows, module.cols});
        break;
      case WeightPart::position_embedding:
        p.wpe = param(name, Shape{module.rows, module.cols});
        break;
      case WeightPart::final_norm:
        p.final_norm.name = name;
        p.final_norm.w = param(name + ".w", Shape{module.rows});
        if (module.bias) p.final_norm.b = param(name + ".b", Shape{module.rows});
        break;
      case WeightPart::lm_head:
        p.lm_head = param(name + ".w", Shape{module.rows, module.cols});
        break;
      default:
        throw InternalError("lay_out_modules: a block's module");
    }
  }
}
// The embeddings, made before the blocks, and the head, after them: a tied lm head is the token
// embedding.
template <typename MakeParam>
void lay_out_embeddings(const ModelWeights& weights, ModelParams& p, MakeParam param) {
  lay_out_modules(weights.embeddings, p, param);
}
template <typename MakeParam>
void lay_out_head(const ModelWeights& weights, ModelParams& p, MakeParam param) {
  lay_out_modules(weights.head, p, param);
  if (weights.tied) p.lm_head = p.wte;
}
// The whole model in the description's order, as both builders make it: the embeddings, each
// block's weights (`block_of(l)`), the head. Returns the blocks'.
template <typename MakeParam, typename BlockOf>
std::vector<BlockWeights> lay_out_model(const ModelWeights& weights, std::int64_t layers,
                                        ModelParams& p, MakeParam param, BlockOf block_of) {
  lay_out_embeddings(weights, p, param);
  std::vector<BlockWeights> blocks;
  for (int l = 0; l < static_cast<int>(layers); ++l) blocks.push_back(block_of(l));
  lay_out_head(weights, p, param);
  return blocks;
}

// How a forward pass treats what it makes.
struct Pass {
  bool recompute = false;  // a forward run again in backward: names get ".recompute", all transient
  bool keep_block = true;  // false under full recompute (hf: checkpointing): only block inputs and
                           // outputs survive the forward
  bool keep_probs = true;  // false unless recompute is none: lean's selective recompute recomputes
                           // the softmax outputs and mask
};

// The flash attention backward's scratch (flash_bwd_scratch_bytes) as a dimension: its bytes at
// batch B, and what a sample adds (the scratch is affine in the batch).
inline Dim flash_bwd_scratch(Dim B, std::int64_t S, std::int64_t A, std::int64_t K, std::int64_t D,
                             DType storage) {
  const Bytes none = flash_bwd_scratch_bytes(0, S, A, K, D, storage);
  return {flash_bwd_scratch_bytes(B.size, S, A, K, D, storage),
          flash_bwd_scratch_bytes(1, S, A, K, D, storage) - none};
}

// What both builders write with: the program of `cfg`, its tensors and ops, the attributes both
// set on an op the same way, and the one GEMM workspace.
class ProgramWriter {
 protected:
  // Room for the blocks' tensors and ops, so that the program's lists are not copied as they
  // grow. A block of hf with full recompute makes up to 87 tensors and 47 ops (llama, counting
  // the embedding, head and loss as four more blocks).
  ProgramWriter(const RunConfig& cfg, Bytes gemm_workspace) : gemm_workspace_(gemm_workspace) {
    p_.config = cfg;
    const auto blocks = static_cast<std::size_t>(std::max<std::int64_t>(cfg.model.layers, 0) + 4);
    p_.tensors.reserve(96 * blocks);
    p_.ops.reserve(64 * blocks);
  }

  // A tensor of `dims`, whose dimensions that hold the batch go to the program's batch_dims. Its
  // component is `component`, else a recomputed tensor's recomputed_activations and any other's its
  // role's.
  int tensor(Name name, const Dims& dims, DType dtype, Role role,
             std::optional<MemoryComponent> component = std::nullopt) {
    Shape shape;
    for (const Dim& d : dims) shape.push_back(d.size);
    if (!component)
      component = name.ends_with(kRecomputeSuffix) ? MemoryComponent::recomputed_activations
                  : no_grad_pass() && name.ends_with(recompute_suffix_)
                      ? MemoryComponent::reference_forward
                      : default_component(role);
    const int id = p_.add_tensor(std::move(name), std::move(shape), dtype, role, *component);
    for (std::size_t i = 0; i < dims.size(); ++i)
      if (dims[i].per_sample != 0)
        p_.batch_dims.push_back(BatchDim{id, static_cast<int>(i), dims[i].per_sample});
    return id;
  }
  // The dimensions of tensor `id`, those that hold the batch included: the shape of a tensor
  // made like it (its gradient, a cast, a dropout's mask).
  Dims dims_of(int id) const {
    Dims dims = fixed(p_.tensor(id).shape);
    auto d = std::lower_bound(p_.batch_dims.begin(), p_.batch_dims.end(), id,
                              [](const BatchDim& b, int tensor) { return b.tensor < tensor; });
    for (; d != p_.batch_dims.end() && d->tensor == id; ++d)
      dims[static_cast<std::size_t>(d->dim)].per_sample = d->per_sample;
    return dims;
  }
  // The gradient of `id`: same shape and dtype, transient, named after the forward tensor (a
  // recomputed tensor's gradient is the gradient of the original).
  int grad_of(int id) {
    Name name = p_.tensor(id).name;
    if (name.ends_with(kRecomputeSuffix)) name.remove_suffix(kRecomputeSuffix.size());
    return grad_named(name + ".grad", id);
  }
  int grad_named(Name name, int like) {
    return tensor(std::move(name), dims_of(like), dtype_of(like), Role::transient);
  }
  DType dtype_of(int id) const { return p_.tensor(id).dtype; }
  // Tensor `id` in `role` after all; a component its builder chose stays, the role's default
  // follows the role.
  void set_role(int id, Role role) {
    Tensor& t = p_.tensors[static_cast<std::size_t>(id)];
    if (t.component == default_component(t.role)) t.component = default_component(role);
    t.role = role;
  }
  // A tensor made as a transient before it was known that the backward reads it (a frozen norm's
  // output that an adapter saves, a sandwich norm's input): an activation of a kept forward.
  void keep_for_backward(int id, const Pass& pass) {
    if (saved(pass) == Role::activation && p_.tensor(id).role == Role::transient)
      set_role(id, Role::activation);
  }
  // A softcap op of the model's `cap`.
  Op& softcap_op(Name name, int x, int y, int layer, double cap, bool recompute = false) {
    Op& o = op(OpKind::softcap_fwd, std::move(name), {x}, {y}, layer, recompute);
    o.softcap = static_cast<float>(cap);
    return o;
  }
  Op& softcap_bwd_op(Name name, int dy, int y, int dx, int layer, double cap) {
    Op& o = op(OpKind::softcap_bwd, std::move(name), {dy, y}, {dx}, layer);
    o.softcap = static_cast<float>(cap);
    return o;
  }
  // Eager attention's softmax backward into dscores: through the cap where the softmax read
  // capped scores (`capped` >= 0, Gemma 2), straight otherwise.
  void softmax_bwd(const Name& pre, int dprobs, int probs, int capped, int dscores, int layer) {
    if (capped < 0) {
      op(OpKind::softmax_bwd, pre + "attn.softmax.bwd", {dprobs, probs}, {dscores}, layer);
      return;
    }
    const int dcapped = grad_of(capped);
    op(OpKind::softmax_bwd, pre + "attn.softmax.bwd", {dprobs, probs}, {dcapped}, layer);
    softcap_bwd_op(pre + "attn.softcap.bwd", dcapped, capped, dscores, layer,
                   p_.config.model.attn_softcap);
  }
  // The step's forward pass under the configuration's recompute, and the pass that recomputes it.
  Pass forward_pass() const {
    Pass pass;
    pass.keep_block = p_.config.recompute != Recompute::full;
    pass.keep_probs = p_.config.recompute == Recompute::none;
    return pass;
  }
  static Pass recompute_pass() { return {.recompute = true}; }
  // A tensor's name in `pass`: a recompute's tensors end in the recompute suffix (a forward under
  // no_grad's in its own, recompute_suffix_).
  Name suffixed(const Pass& pass, Name name) const {
    if (pass.recompute) name += recompute_suffix_;
    return name;
  }
  // Whether the recompute passes are a forward under torch.no_grad (a preference trainer's
  // reference and KL forwards): what they make is read by nothing after them.
  bool no_grad_pass() const { return recompute_suffix_ != kRecomputeSuffix; }
  // The role of what the backward reads: an activation of a kept forward; a recompute's are
  // transient.
  static Role saved(const Pass& pass) {
    return pass.keep_block && !pass.recompute ? Role::activation : Role::transient;
  }
  // A shape no batch changes (a parameter's) as dimensions.
  static Dims fixed(const Shape& shape) { return Dims(shape.begin(), shape.end()); }
  Op& op(OpKind kind, Name name, TensorIds inputs, TensorIds outputs, int layer,
         bool recompute = false) {
    if (recompute) name += recompute_suffix_;
    Op& o = p_.add_op(kind, std::move(name), std::move(inputs), std::move(outputs));
    o.layer = layer;
    o.recompute = recompute;
    return o;
  }
  // The heads of an op that reads q|k|v.
  void attention_attrs(Op& o) const {
    o.heads = p_.config.model.heads;
    o.kv_heads = p_.config.model.kv_heads;
  }
  // An RMSNorm op's weight offset: 1 for Gemma's (1 + w).
  Op& rms_attrs(Op& o) const {
    if (p_.config.model.offset_norms) o.norm_offset = 1.0f;
    return o;
  }
  // The model's GeGLU on a swiglu op.
  Op& gate_attrs(Op& o) const {
    o.gelu_gate = p_.config.model.gelu_mlp;
    return o;
  }
  // The embedding's scale (Gemma: sqrt(hidden)) on an embedding op.
  Op& embed_attrs(Op& o) const {
    if (p_.config.model.embed_scale)
      o.embed_scale = static_cast<float>(std::sqrt(static_cast<double>(p_.config.model.hidden)));
    return o;
  }
  // A dropout site's probability and seed; nothing without dropout.
  void dropout_attrs(Op& o, int layer, DropoutSite site) const {
    if (p_.config.dropout <= 0.0) return;
    o.dropout_p = p_.config.dropout;
    o.seed = dropout_seed(layer, site);
  }
  // A fused attention op's: its heads, its dropout, and the model's cap on the scores.
  void flash_attrs(Op& o, int layer) const {
    attention_attrs(o);
    dropout_attrs(o, layer, DropoutSite::attn_probs);
    o.softcap = static_cast<float>(p_.config.model.attn_softcap);
  }
  // The q/k norm of q|k|v `qkv` (weights qw, kw) into `out` and the heads' statistics `rstd`. A
  // norm over the whole q and k projections (OLMoE's, whose heads equal its kv heads) is one of a
  // single head each.
  Op& qk_norm_op(const Name& name, int qkv, const Param& qw, const Param& kw, int out, int rstd,
                 int layer, bool recompute) {
    Op& o = op(OpKind::qk_norm_fwd, name, {qkv, qw.w, kw.w}, {out, rstd}, layer, recompute);
    qk_norm_heads(o);
    return rms_attrs(o);
  }
  void qk_norm_heads(Op& o) const {
    attention_attrs(o);
    if (p_.config.model.qk_norm_full_width) o.heads = o.kv_heads = 1;
  }
  // The q/k norm's statistics per token: one per head, or one each for q and k (full width).
  std::int64_t qk_norm_rows() const {
    const ModelConfig& m = p_.config.model;
    return m.qk_norm_full_width ? 2 : m.heads + m.kv_heads;
  }
  // Its backward from dy into dqkv, and into the weights' gradients where they train.
  Op& qk_norm_bwd_op(const Name& name, int dy, int qkv, const Param& qw, const Param& kw, int rstd,
                     int dqkv, int layer) {
    TensorIds out{dqkv};
    if (qw.trainable()) out.insert(out.end(), {qw.grad, kw.grad});
    Op& o = row_sum(OpKind::qk_norm_bwd, name, {dy, qkv, qw.w, kw.w, rstd}, std::move(out), layer);
    qk_norm_heads(o);
    return rms_attrs(o);
  }
  // Dropout of x at `site` (ops `name`_dropout, tensors `name`.drop and its `mask`, saved for the
  // backward); returns the dropped tensor.
  int dropout_fwd(const Name& name, int x, int layer, DropoutSite site, const Pass& pass,
                  DType mask_dtype, int& mask) {
    const int y = tensor(suffixed(pass, name + ".drop"), dims_of(x), dtype_of(x), Role::transient);
    mask = tensor(suffixed(pass, name + ".mask"), dims_of(x), mask_dtype, saved(pass));
    dropout_attrs(op(OpKind::dropout_fwd, name + "_dropout", {x}, {y, mask}, layer, pass.recompute),
                  layer, site);
    return y;
  }
  // Its backward from dy into the gradient of `like` (the dropout's input), which it returns.
  int dropout_bwd(const Name& name, int dy, int mask, int like, int layer, DropoutSite site) {
    const int dx = grad_of(like);
    dropout_attrs(op(OpKind::dropout_bwd, name + "_dropout.bwd", {dy, mask}, {dx}, layer), layer,
                  site);
    return dx;
  }
  // The names a builder gives bitsandbytes' AdamW state (its moments and their absmax).
  struct AdamwStateNames {
    std::string_view m, v, m_absmax, v_absmax;  // suffixes of the parameter's name
  };
  // The AdamW state bitsandbytes keeps for parameter `name` of `dims` under the configuration's
  // optimizer (core/quant_layout.h): fp32 moments, or from kMin8bitSize elements under an 8-bit
  // optimizer 8-bit codes with an fp32 absmax per kOptimizer8bitBlock; a paged optimizer keeps the
  // moments of tensors from kPagedMinNumel elements in managed memory. Into param.m, v, m_absmax
  // and v_absmax (-1 without 8-bit state).
  void bnb_adamw_state(const Name& name, const Dims& dims, const AdamwStateNames& names,
                       Param& param) {
    const Optimizer o = p_.config.optimizer;
    const bool eight_bit = is_8bit(o) && optimizer_state_is_8bit(param.numel);
    const Role where = is_paged(o) && param.numel >= kPagedMinNumel ? Role::paged_optimizer_state
                                                                    : Role::optimizer_state;
    const DType moment = eight_bit ? DType::u8 : DType::f32;
    param.m = tensor(name + names.m, dims, moment, where);
    param.v = tensor(name + names.v, dims, moment, where);
    if (!eight_bit) return;
    const std::int64_t blocks = quant_blocks(param.numel, kOptimizer8bitBlock);
    param.m_absmax = tensor(name + names.m_absmax, {blocks}, DType::f32, Role::optimizer_state);
    param.v_absmax = tensor(name + names.v_absmax, {blocks}, DType::f32, Role::optimizer_state);
  }
  // The tensors bitsandbytes stores for rows [row_offset, +rows) of a frozen linear of `in`
  // columns under `quant`: codes and, per block, absmax (nested under double quantisation).
  QuantModule quantized_module(Name name, std::int64_t row_offset, std::int64_t rows,
                               std::int64_t in, QuantKind quant, bool double_quant) {
    QuantModule q;
    q.name = std::move(name);
    q.row_offset = row_offset;
    q.rows = rows;
    q.blocks = quant_blocks(rows * in, kQuant4bitBlock);
    const bool nested = is_4bit(quant) && double_quant;
    for (const QuantizedTensor& t : quantized_weight_tensors(rows * in, rows, quant, nested)) {
      const Name part = q.name + ".w." + t.name;
      // Codes and 8-bit absmax are bytes; every other part is fp32.
      const bool bytes = t.name == "weight" || (t.name == "absmax" && nested);
      const int id = tensor(part, {bytes ? t.bytes : t.bytes / 4}, bytes ? DType::u8 : DType::f32,
                            Role::weight, MemoryComponent::quantized_weights);
      if (t.name == "weight") q.codes = id;
      if (t.name == "absmax" || t.name == "row_absmax") q.absmax = id;
      if (t.name == "nested_absmax") q.absmax2 = id;
      if (t.name == "offset") q.offset = id;
    }
    return q;
  }
  // The block linear `module` of the weights description (its LoRA target modules and their rows,
  // in row order, from `module.cols` columns), named `name`, as the program's configuration has
  // it: its weight by make_weight(name, shape, false), or under `quant` the quantised modules
  // standing for it; its bias by make_weight(name, shape, true); under fine-tuning an adapter on
  // each targeted module, A and B by make_adapter(name, shape), numbered from `adapter_index`
  // (the layer's count so far, advanced). bitsandbytes quantises nn.Linear modules alone: an MoE
  // layer's router and experts (bare parameters in transformers 5) stay whole; the experts'
  // weight is [E, out, in], and their adapter PEFT's ParamWrapper's, A [E r, in] and B [out, E r].
  template <typename MakeWeight, typename MakeAdapter>
  Linear linear_of(const Name& name, const WeightModule& module, QuantKind quant,
                   int& adapter_index, MakeWeight make_weight, MakeAdapter make_adapter,
                   bool adapters = true) {
    const RunConfig& cfg = p_.config;
    const std::span<const ModuleRows> modules = module.modules();
    const std::int64_t in = module.cols;
    Linear lin;
    lin.name = name;
    lin.in = in;
    lin.out = module.rows;
    lin.experts = module.kind == WeightKind::experts ? module.experts : 0;
    if (lin.experts > 0) {
      lin.w = make_weight(name + ".w", Shape{lin.experts, lin.out, in}, false);
    } else if (quant == QuantKind::none || modules.empty()) {
      lin.w = make_weight(name + ".w", Shape{lin.out, in}, false);
    } else {
      std::int64_t row = 0;
      for (const auto& [target, rows] : modules) {
        lin.quant.push_back(quantized_module(module_name(name, target, modules.size()), row, rows,
                                             in, quant, cfg.double_quant == Toggle::on));
        row += rows;
      }
    }
    if (module.bias) lin.b = make_weight(name + ".b", Shape{lin.out}, true);
    if (!is_finetune(cfg) || !adapters) return lin;
    std::int64_t col = 0;
    for (const auto& [target, rows] : modules) {
      if (lora_targets_module(cfg.lora_targets, cfg.model, target)) {
        Adapter ad;
        ad.name = module_name(name, target, modules.size());
        ad.index = adapter_index++;
        const std::int64_t r = cfg.lora_rank * std::max<std::int64_t>(lin.experts, 1);
        ad.a = make_adapter(ad.name + ".lora_A", Shape{r, in});
        ad.b = make_adapter(ad.name + ".lora_B", Shape{rows, r});
        ad.col_offset = col;
        ad.out = rows;
        lin.lora.push_back(std::move(ad));
      }
      col += rows;
    }
    return lin;
  }

  // Dequantises `modules` (quantised under `quant`) into their rows of `w`, the compute-dtype
  // copy a GEMM reads: one op per module, in the forward (`backward` false, `recompute` in a
  // recompute) or the backward; a double-quantised module first rebuilds its fp32 absmax.
  void dequantize(const std::vector<QuantModule>& modules, int w, QuantKind quant, int layer,
                  bool recompute, bool backward) {
    for (const QuantModule& q : modules) {
      TensorIds in{q.codes, q.absmax};
      if (q.absmax2 >= 0) in.push_back(q.absmax2);
      if (q.offset >= 0) in.push_back(q.offset);
      TensorIds out{w};
      if (q.absmax2 >= 0)
        out.push_back(tensor(q.name + ".w.absmax.dq" + (backward ? ".bwd" : ""), {q.blocks},
                             DType::f32, Role::workspace, MemoryComponent::dequant_transient));
      Op& o = op(OpKind::dequantize, q.name + ".dequantize" + (backward ? ".bwd" : ""),
                 std::move(in), std::move(out), layer, recompute);
      o.quant = quant;
      o.double_quant = q.absmax2 >= 0;
      o.row_offset = q.row_offset;
      o.rows = q.rows;
    }
  }
  // The weight operand of an MoE layer's experts' GEMM: the parameter, or under LoRA PEFT's
  // effective weight W + scale B A (ParamWrapper), folded per forward by baddbmm in W's dtype, the
  // adapters cast to it where they are of another (into `casts`, which baddbmm saves); grouped_mm
  // saves the effective weight when its input requires grad (`keep`).
  int experts_weight(const Linear& lin, const Pass& pass, bool keep, int layer, float lora_scale,
                     TensorIds& casts) {
    if (lin.lora.empty()) return lin.w.w;
    const Adapter& ad = lin.lora.front();
    const DType wd = dtype_of(lin.w.w);
    const Role role = saved(pass);
    if (dtype_of(ad.a.w) != wd)
      for (const int p : {ad.a.w, ad.b.w})
        casts.push_back(tensor(suffixed(pass, p_.tensor(p).name + ".cast"), dims_of(p), wd, role));
    const int w_eff = tensor(suffixed(pass, lin.name + ".w.lora"), dims_of(lin.w.w), wd,
                             keep ? role : Role::transient, MemoryComponent::dequant_transient);
    Op& o = gemm(OpKind::expert_lora_fwd, ad.name + ".lora", {lin.w.w, ad.a.w, ad.b.w}, {w_eff},
                 layer, pass.recompute);
    o.lora_scale = lora_scale;
    o.held = casts;
    return w_eff;
  }
  // Its backward from dy into dx, and into the weight's gradient where it trains; under LoRA into
  // the effective weight's (a transient in W's dtype), whose backward gives the adapter's A and B
  // theirs, through the casts' gradients where the adapters were cast.
  void experts_bwd(const Linear& lin, int w_operand, const TensorIds& casts, int dy, int offsets,
                   int x, int dx, int layer, float lora_scale) {
    TensorIds in{dy, w_operand, offsets};
    TensorIds out{dx};
    int dw_eff = -1;
    if (lin.trainable() || !lin.lora.empty()) {
      in.push_back(x);
      if (!lin.trainable())
        dw_eff = tensor(lin.name + ".w.lora.grad", dims_of(lin.w.w), dtype_of(lin.w.w),
                        Role::transient, MemoryComponent::dequant_transient);
      out.push_back(lin.trainable() ? lin.w.grad : dw_eff);
    }
    gemm(OpKind::grouped_linear_bwd, lin.name + ".bwd", std::move(in), std::move(out), layer);
    if (lin.lora.empty()) return;
    const Adapter& ad = lin.lora.front();
    Op& o = gemm(OpKind::expert_lora_bwd, ad.name + ".lora.bwd", {dw_eff, ad.a.w, ad.b.w},
                 {ad.a.grad, ad.b.grad}, layer);
    o.lora_scale = lora_scale;
    o.held = casts;
    for (const int c : casts)
      o.held.push_back(
          tensor(p_.tensor(c).name + ".grad", dims_of(c), dtype_of(c), Role::transient));
  }
  // An adapter's input dropout: its own seed per adapter, the same in forward and backward.
  void lora_dropout_attrs(Op& o, int layer, const Adapter& ad) const {
    o.dropout_p = p_.config.lora_dropout;
    o.seed =
        dropout_seed(layer, static_cast<DropoutSite>(static_cast<std::uint64_t>(DropoutSite::lora) +
                                                     static_cast<std::uint64_t>(ad.index)));
  }
  // The GEMM workspace (cuBLASLt's scratch, and the row sums' partials), created by the first op
  // that lists it, so that a program without such ops (the flash attention scope) lists no unused
  // tensor. lean: one for the step, from its first user to its last. hf (per_thread_workspaces):
  // PyTorch's cuBLAS workspace of each thread that runs GEMMs, the main thread's (the forward) and
  // the autograd engine's (the backward, and the checkpointed blocks' recomputes), each made at its
  // thread's first GEMM and kept for the rest of the run (Tensor::lazy); torch 2.11 holds one per
  // cuBLAS handle, and a handle per thread (CublasHandlePool.cpp).
  int workspace() {
    int& w = workspaces_[autograd_thread_ ? 1 : 0];
    if (w < 0) {
      w = tensor(autograd_thread_ ? "gemm.workspace.autograd" : "gemm.workspace", {gemm_workspace_},
                 DType::u8, Role::workspace);
      p_.tensors[static_cast<std::size_t>(w)].lazy = per_thread_workspaces_;
    }
    return w;
  }
  void per_thread_workspaces() { per_thread_workspaces_ = true; }
  // From here on the ops run on the autograd engine's thread (loss.backward()), which has a
  // workspace of its own where they are per thread.
  void on_autograd_thread() { autograd_thread_ = per_thread_workspaces_; }
  // Linear and eager attention GEMMs: the workspace is their last input.
  Op& gemm(OpKind kind, Name name, TensorIds inputs, TensorIds outputs, int layer,
           bool recompute = false) {
    if (gemm_workspace_ > 0) inputs.push_back(workspace());
    return op(kind, std::move(name), std::move(inputs), std::move(outputs), layer, recompute);
  }
  // Ops whose kernels sum over the rows (norm backward: dw, db; embedding backward) keep their
  // fp32 partials in the GEMM workspace, their last input too: what a run uses is what the
  // program lists. So the workspace lives until the last of them, not only the last GEMM.
  Op& row_sum(OpKind kind, Name name, TensorIds inputs, TensorIds outputs, int layer) {
    if (gemm_workspace_ > 0) inputs.push_back(workspace());
    return op(kind, std::move(name), std::move(inputs), std::move(outputs), layer);
  }

  Program p_;
  // What a recompute pass's names end in: kRecomputeSuffix, or a no_grad forward's own (".ref").
  std::string_view recompute_suffix_ = kRecomputeSuffix;
  Bytes gemm_workspace_;
  int workspaces_[2] = {-1, -1};  // the main thread's, the autograd thread's
  bool per_thread_workspaces_ = false, autograd_thread_ = false;
};

// hf: whether attention saves the query as a view of the q|k|v projection
// (build_hf_attention.cpp); the one place where the batch changes the hf program's structure, not
// only its sizes.
bool hf_query_is_a_view(const RunConfig& cfg, std::int64_t batch);

}  // namespace vrambench::build_common
