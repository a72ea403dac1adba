// The closed-form model of the hf framework: the step that src/program/build_hf.cpp builds (PyTorch
// eager autograd running transformers' GPT-2 or Llama code, the Trainer loop, CUDA), followed op by
// op over symbolic sizes. Every tensor is a ledger entry of fixed bytes or of bytes for one sample;
// it enters the ledger at the op that first lists it and leaves after the op that lists it last,
// as the program's liveness has it. docs/memory-model.md ("Frameworks: lean and hf") lists what
// each op keeps.

#include <algorithm>
#include <array>
#include <cstdint>
#include <string_view>
#include <utility>
#include <vector>

#include "core/error.h"
#include "estimate/walk.h"
#include "program/build_common.h"
#include "program/program.h"

namespace vrambench::estimate_walk {
namespace {

// A ledger name ("3.attn.qkv.out") kept as the FNV-1a hash of its characters and their count. It
// is built piece by piece like the string it stands for (a + ".out" hashes as the joined text
// would), compares in one step and allocates nothing; the walk makes and looks up a few thousand
// of them per step. Two of a step's names would have to agree in 64 bits of hash and in length
// to be taken for one another.
class Name {
 public:
  constexpr Name() = default;
  constexpr Name(const char* text) : Name(std::string_view(text)) {}  // NOLINT: a literal is a name
  constexpr Name(std::string_view text) { append(text); }             // NOLINT
  friend constexpr Name operator+(Name a, std::string_view text) {
    a.append(text);
    return a;
  }
  friend constexpr Name operator+(Name a, const char* text) { return a + std::string_view(text); }
  // The decimal digits of a block's index.
  friend constexpr Name operator+(Name a, std::int64_t number) {
    std::array<char, 20> digits{};
    std::size_t n = 0;
    do {
      digits[n++] = static_cast<char>('0' + number % 10);
      number /= 10;
    } while (number > 0);
    while (n > 0) a.append(std::string_view(&digits[--n], 1));
    return a;
  }
  constexpr bool empty() const { return length_ == 0; }
  friend constexpr bool operator==(const Name&, const Name&) = default;

 private:
  constexpr void append(std::string_view text) {
    for (const char c : text) hash_ = (hash_ ^ static_cast<unsigned char>(c)) * 0x100000001b3ULL;
    length_ += text.size();
  }
  std::uint64_t hash_ = 0xcbf29ce484222325ULL;
  std::size_t length_ = 0;
};

// A linear layer's sizes and what its forward leaves for its backward.
struct Lin {
  Name name;               // "3.attn.qkv"
  Bytes in = 0, out = 0;   // features
  bool bias = false;
  Name x;                  // the GEMM's saved input (autocast: its 16-bit copy)
  bool x_cast = false;     // autocast cast the input: dx is cast back to the input's dtype
  Bytes x_orig_elem = 0;   // element size of the input before the cast
};

class HfWalk {
 public:
  HfWalk(const RunConfig& cfg, const DeviceOverhead& overhead, TensorEvents* events,
         std::int64_t batch)
      : cfg_(cfg), events_(events) {
    query_view_ = build_common::hf_query_is_a_view(cfg, batch);
    const ModelConfig& m = cfg.model;
    S_ = cfg.seq;
    H_ = m.hidden;
    A_ = m.heads;
    K_ = m.kv_heads;
    D_ = m.head_dim();
    Q_ = qkv_width(m);
    F_ = m.ffn;
    V_ = m.vocab;
    L_ = m.layers;
    amp_ = is_autocast(cfg.dtype);
    cdt_ = activation_dtype(cfg.dtype);
    wdt_ = amp_ || cfg.dtype == Precision::fp32 || cfg.dtype == Precision::tf32 ? DType::f32
                                                                                 : cdt_;
    e_ = dtype_size(cdt_);
    w_ = dtype_size(wdt_);
    gpt_ = m.arch == Arch::gpt;
    eager_ = cfg.attention == Attention::eager;
    dropout_ = cfg.dropout > 0.0;
    ckpt_ = cfg.recompute == Recompute::full;
    accum_ = cfg.grad_accum > 1;
    own_ = cfg.allocator == AllocatorKind::direct;
    context_ = overhead.context;
    workspace_bytes_ = overhead.gemm_workspace;
    // A block makes up to a few hundred events (its tensors, each allocated and freed, and with
    // an optimizer its parameters' state).
    if (events_) events_->reserve(static_cast<std::size_t>(256 * (L_ + 4)));
  }

  std::vector<Point> run() {
    model_state();
    forward();
    backward();
    optimizer();
    std::vector<Point> points;
    points.reserve(frontier_.size() + 1);
    for (const Candidate& c : frontier_) points.push_back(spell_out(c));
    if (frontier_.empty() || frontier_.back().op_index != ops_seen_)
      points.push_back(spell_out(last_));
    return points;
  }

 private:
  // ---- the ledger ---------------------------------------------------------------------------

  struct Entry {
    Name name;
    MemoryComponent component;
    bool fixed = false;
    Bytes bytes = 0;  // fixed bytes, or bytes of one sample
    std::int32_t slot = -1;  // its tensor in the events (-1: not recorded)
  };

  // Bytes of one sample of a [S, width] tensor of `elem`-byte elements.
  Bytes rows(Bytes width, Bytes elem) const {
    return checked_mul(checked_mul(S_, width, "activation elements"), elem, "activation bytes");
  }
  Bytes square(Bytes elem) const { return rows(checked_mul(A_, S_, "heads x seq"), elem); }
  Bytes param(Bytes numel, Bytes elem) const {
    return held(checked_mul(numel, elem, "parameter bytes"), own_);
  }

  void add(Name name, MemoryComponent c, Bytes per_sample, int rank = -1) {
    enter({name, c, false, per_sample,
           allocate_with_op(0, per_sample, rank >= 0 ? rank : rank_of(name))});
  }
  void add_fixed(Name name, MemoryComponent c, Bytes bytes) {
    enter({name, c, true, bytes, allocate_with_op(bytes, 0, rank_of(name))});
  }
  // The ledger is searched from its end: what an op drops was mostly added last (a block's
  // backward drops what its forward added after every later block's tensors were dropped).
  std::vector<Entry>::iterator find(Name name) {
    const auto it =
        std::find_if(live_.rbegin(), live_.rend(), [&](const Entry& x) { return x.name == name; });
    return it == live_.rend() ? live_.end() : std::prev(it.base());
  }
  bool has(Name name) { return find(name) != live_.end(); }
  void drop(Name name) {
    const auto it = find(name);
    if (it == live_.end())
      throw InternalError("hf estimate: a tensor dropped twice, or never added");
    free_now(it->slot);
    uncount(*it);
    live_.erase(it);
  }
  // The ledger's bytes by component, and their sums on the device (fixed, paged state left out)
  // and per sample, kept as entries come and go, so that a point need not sum every live entry.
  static constexpr std::size_t kComponents =
      static_cast<std::size_t>(MemoryComponent::allocator_fragmentation) + 1;
  Bytes& total(const Entry& x) {
    return (x.fixed ? live_fixed_ : live_per_sample_)[static_cast<std::size_t>(x.component)];
  }
  Bytes* sum_of(const Entry& x) {
    if (!x.fixed) return &live_per_sample_sum_;
    return x.component == kPaged ? nullptr : &live_fixed_sum_;
  }
  void count(const Entry& x) {
    total(x) = checked_add(total(x), x.bytes, "ledger bytes");
    if (Bytes* sum = sum_of(x)) *sum = checked_add(*sum, x.bytes, "breakdown total");
  }
  void uncount(const Entry& x) {
    total(x) -= x.bytes;
    if (Bytes* sum = sum_of(x)) *sum -= x.bytes;
  }
  void enter(Entry x) {
    count(x);
    live_.push_back(std::move(x));
  }
  // Tensors that only the next op lists (held temporaries, scratch).
  void once(MemoryComponent c, Bytes per_sample) {
    once_.push_back({{}, c, false, per_sample, allocate_with_op(0, per_sample, kOutput)});
  }
  void once_fixed(MemoryComponent c, Bytes bytes) {
    once_.push_back({{}, c, true, bytes, allocate_with_op(bytes, 0, kOutput)});
  }

  // A parameter gradient of `numel` elements written by the next op: from there to the end of the
  // step; accumulating, .grad is whole-step and the op holds a new gradient of its size.
  void write_grad(Bytes numel) {
    const Bytes bytes = param(numel, w_);
    if (accum_) {
      once_fixed(kGradients, bytes);
    } else {
      grads_ = checked_add(grads_, bytes, "gradients");
      allocate_with_op(bytes, 0, kEarly);  // .grad, to the end of the step
    }
  }

  // ---- the tensor events (the caching allocator's replay, allocator_share.cpp) --------------

  // Within one op the step allocates in the order the builder created the tensors: the .grad
  // tensors, the causal mask and rope's cos/sin were created with the model, before the op's
  // outputs; the GEMM workspace with the first GEMM, after its output, and before what that GEMM
  // holds (kAfterWorkspace); an op's held temporaries last.
  static constexpr int kEarly = 0, kOutput = 1, kWorkspaceRank = 2, kAfterWorkspace = 3;
  static int rank_of(Name name) {
    static constexpr Name kMask = "attn.causal_mask", kRope = "rope.cos_sin",
                          kGemmWorkspace = "gemm.workspace";
    if (name == kMask || name == kRope) return kEarly;
    if (name == kGemmWorkspace) return kWorkspaceRank;
    return kOutput;
  }
  struct Pending {
    std::int32_t slot;
    int rank;
    Bytes fixed, per_sample;
  };
  // A tensor of fixed + B * per_sample bytes that the next op allocates; returns its slot (-1
  // when no events are recorded).
  std::int32_t allocate_with_op(Bytes fixed, Bytes per_sample, int rank) {
    if (!events_) return -1;
    const std::int32_t slot = next_slot_++;
    pending_.push_back({slot, rank, fixed, per_sample});
    return slot;
  }
  // A tensor allocated before the first op (in the order the builder created them).
  void allocate_now(bool fixed, Bytes bytes) {
    if (!events_) return;
    events_->push_back({next_slot_++, true, fixed ? bytes : 0, fixed ? 0 : bytes});
  }
  void free_now(std::int32_t slot) {
    if (!events_ || slot < 0) return;
    const auto it = std::find_if(pending_.begin(), pending_.end(),
                                 [&](const Pending& p) { return p.slot == slot; });
    if (it != pending_.end()) {
      pending_.erase(it);  // dropped before the op that would have allocated it
      return;
    }
    events_->push_back({slot, false, 0, 0});
  }
  // The op's allocations in the builder's order; its temporaries (once) go after it.
  void record_op_events() {
    if (!events_) return;
    std::stable_sort(pending_.begin(), pending_.end(),
                     [](const Pending& a, const Pending& b) { return a.rank < b.rank; });
    for (const Pending& p : pending_) events_->push_back({p.slot, true, p.fixed, p.per_sample});
    pending_.clear();
    for (const Entry& x : once_)
      if (x.slot >= 0) events_->push_back({x.slot, false, 0, 0});
  }

  // The workspace lives from the first GEMM to the end of the backward; a flag, not a search of
  // the ledger, says whether it is there (it sits deep in the ledger, under every activation).
  void workspace_on() {
    if (workspace_bytes_ > 0 && !workspace_live_) {
      add_fixed("gemm.workspace", kWorkspace, workspace_bytes_);
      workspace_live_ = true;
    }
  }

  // What a point's op saw (at()), for spell_out.
  struct OnceSeen {
    MemoryComponent component;
    bool fixed;
    Bytes bytes;
  };
  struct Seen {
    std::array<Bytes, kComponents> fixed, per_sample;  // the ledger's totals
    Bytes weights, state, grads;
    std::array<OnceSeen, 8> once;  // the op's temporaries
    std::size_t once_count;
  };
  struct Candidate {
    Point point;  // its totals; the components are spell_out's
    Seen seen;
    Bytes at_one = 0;           // bytes at batch 1
    std::int64_t op_index = 0;  // which at() it was, from 1
  };

  // Records the op: everything in the ledger, the whole-step state, the op's own temporaries. Only
  // the points that can be a peak are kept (frontier_), and the last one: a point is never the peak
  // at any batch when an earlier one has as many bytes at batch 1 and as many per sample, or a
  // later one more of either and as many of the other (the estimate's envelope). A kept point's
  // components are spelled out at the end, from what its op saw.
  void at(std::string_view op, std::int64_t block = -1, bool forward = false) {
    record_op_events();
    Candidate& now = last_;
    now.point.block = block;
    now.point.forward = forward;
    now.point.op = op;
    Seen& seen = now.seen;
    seen.fixed = live_fixed_;
    seen.per_sample = live_per_sample_;
    seen.weights = weights_;
    seen.state = state_;
    seen.grads = grads_;
    Bytes fixed = checked_add(checked_add(weights_, state_, "breakdown total"),
                              checked_add(grads_, context_, "breakdown total"), "breakdown total");
    fixed = checked_add(fixed, live_fixed_sum_, "breakdown total");
    // Tokens and targets (i32) and the ledger.
    Bytes per_sample = checked_add(rows(2, 4), live_per_sample_sum_, "breakdown total");
    if (once_.size() > seen.once.size())
      throw InternalError("hf estimate: more than 8 temporaries in one op");
    seen.once_count = once_.size();
    for (std::size_t k = 0; k < once_.size(); ++k) {
      const Entry& x = once_[k];
      seen.once[k] = {x.component, x.fixed, x.bytes};
      if (!x.fixed)
        per_sample = checked_add(per_sample, x.bytes, "breakdown total");
      else if (x.component != kPaged)
        fixed = checked_add(fixed, x.bytes, "breakdown total");
    }
    once_.clear();
    now.point.fixed_total = fixed;
    now.point.per_sample_total = per_sample;
    now.at_one = checked_add(fixed, per_sample, "breakdown total");
    ++ops_seen_;
    auto covers = [](const Candidate& a, const Candidate& b) {
      return a.at_one >= b.at_one && a.point.per_sample_total >= b.point.per_sample_total;
    };
    if (std::any_of(frontier_.begin(), frontier_.end(),
                    [&](const Candidate& c) { return covers(c, now); }))
      return;
    std::erase_if(frontier_, [&](const Candidate& c) { return covers(now, c); });
    frontier_.push_back(now);
    frontier_.back().op_index = ops_seen_;
  }

  // The components of a point, in the order the breakdown lists them: the whole-step state, the
  // ledger's components in the enum's order, then the op's own temporaries.
  Point spell_out(const Candidate& c) const {
    Point p = c.point;
    const Seen& s = c.seen;
    add_to(p.fixed, kWeights, s.weights);
    add_to(p.fixed, kOptimizerState, s.state);
    add_to(p.fixed, kGradients, s.grads);
    add_to(p.fixed, kContext, context_);
    add_to(p.per_sample, kInputs, rows(2, 4));
    for (std::size_t k = 0; k < kComponents; ++k) {
      add_to(p.fixed, static_cast<MemoryComponent>(k), s.fixed[k]);
      add_to(p.per_sample, static_cast<MemoryComponent>(k), s.per_sample[k]);
    }
    for (std::size_t k = 0; k < s.once_count; ++k) {
      const OnceSeen& x = s.once[k];
      add_to(x.fixed ? p.fixed : p.per_sample, x.component, x.bytes);
    }
    return p;
  }

  // ---- parameters ---------------------------------------------------------------------------

  // Element counts of one block's parameter tensors, as build_hf.cpp makes them.
  std::vector<Bytes> block_tensors() const {
    const Bytes QH = Q_ * H_, HH = H_ * H_, FH = F_ * H_;
    if (gpt_) return {H_, H_, QH, Q_, HH, H_, H_, H_, FH, F_, FH, H_};
    std::vector<Bytes> out{H_, QH};
    if (cfg_.model.qkv_bias) out.push_back(Q_);
    out.insert(out.end(), {HH, H_, FH, FH, FH});
    return out;
  }
  std::vector<Bytes> all_tensors() const {
    std::vector<Bytes> out{V_ * H_};
    if (gpt_) out.push_back(position_rows(cfg_.model, S_) * H_);
    for (Bytes l = 0; l < L_; ++l)
      for (Bytes n : block_tensors()) out.push_back(n);
    out.push_back(H_);
    if (gpt_) out.push_back(H_);
    if (!cfg_.model.tied_embeddings) out.push_back(V_ * H_);
    return out;
  }

  // Weights in the model's dtype; AdamW's exp_avg and exp_avg_sq in that dtype and a 4-byte step
  // per tensor; SGD's momentum; accumulating, every gradient from the start.
  void model_state() {
    // Tokens and targets first, then each parameter with its state, as the builder creates them.
    allocate_now(false, rows(1, 4));
    allocate_now(false, rows(1, 4));
    for (Bytes n : all_tensors()) {
      allocate_now(true, param(n, w_));
      if (cfg_.optimizer == Optimizer::adamw) {
        allocate_now(true, param(n, w_));
        allocate_now(true, param(n, w_));
        allocate_now(true, param(1, 4));
      } else if (cfg_.optimizer == Optimizer::sgd) {
        allocate_now(true, param(n, w_));
      }
      if (accum_) allocate_now(true, param(n, w_));
      weights_ = checked_add(weights_, param(n, w_), "weights");
      params_ = checked_add(params_, n, "parameters");
      if (cfg_.optimizer == Optimizer::adamw)
        state_ = checked_add(state_, checked_add(2 * param(n, w_), param(1, 4), "adamw"), "state");
      else if (cfg_.optimizer == Optimizer::sgd)
        state_ = checked_add(state_, param(n, w_), "momentum");
      if (accum_) grads_ = checked_add(grads_, param(n, w_), "gradients");
    }
  }

  // ---- forward ------------------------------------------------------------------------------

  struct Pass {
    bool replay = false;
    bool keep = true;  // false: the checkpointed forward, which keeps only the block outputs
  };
  // Whether what the backward reads stays: in a kept forward and in a replay.
  static bool kept(const Pass& pass) { return pass.keep || pass.replay; }
  static MemoryComponent saved_as(const Pass& pass, MemoryComponent c = kSaved) {
    return pass.replay ? kRecomputed : pass.keep ? c : kTransient;
  }
  // After a tensor's last forward use: it stays when the backward reads it and the pass keeps it.
  void done(Name name, const Pass& pass, bool read_by_backward = true) {
    if (!read_by_backward || !kept(pass)) drop(name);
  }

  // The 16-bit copy of a weight (autocast): cached through the forward (until the loss), and saved
  // by the GEMM for its backward; a replay's copy lives from the replayed GEMM to its backward.
  void weight_copy(Name name, Bytes numel, const Pass& pass, bool saved, std::int64_t block,
                   bool fwd) {
    add_fixed(name, kWeights, param(numel, e_));
    at("autocast weight cast", block, fwd);
    if (!pass.replay) cache_.push_back({name, saved && pass.keep});
  }

  // y = x w^T + b; autocast casts x (when not 16-bit) and the weights first. Returns what the
  // backward needs. `x_elem` is the input's element size; `y` enters the ledger as `y_component`.
  // `x_dies_at_cast`: the cast is x's last use (autocast).
  Lin linear_fwd(Name name, Bytes in, Bytes out, bool bias, Name x, Bytes x_elem, Name y,
                 MemoryComponent y_component, const Pass& pass, std::int64_t block,
                 bool x_dies_at_cast = true) {
    const bool fwd = !pass.replay;
    Lin lin{name, in, out, bias, x, false, x_elem};
    if (amp_ && x_elem != e_) {
      lin.x = name + ".in.autocast";
      lin.x_cast = true;
      add(lin.x, saved_as(pass), rows(in, e_));
      at("autocast input cast", block, fwd);
      if (x_dies_at_cast) drop(x);
    }
    if (amp_) {
      weight_copy(name + ".w.autocast", checked_mul(in, out, "linear"), pass, true, block, fwd);
      if (bias) weight_copy(name + ".b.autocast", out, pass, false, block, fwd);
    }
    workspace_on();
    add(y, y_component, rows(out, e_));
    // Tensors the GEMM holds are made after it, so after the workspace its first GEMM makes.
    for (const auto& [extra, bytes] : with_gemm_)
      add(extra, saved_as(pass), bytes, kAfterWorkspace);
    at("linear", block, fwd);
    // A replay's bias copy is read by its GEMM alone.
    if (amp_ && bias && pass.replay) drop(name + ".b.autocast");
    if (lin.x_cast) done(lin.x, pass);
    for (const auto& [extra, bytes] : with_gemm_) done(extra, pass);
    with_gemm_.clear();
    return lin;
  }

  // gpt: LayerNorm (x, fp32 mean and rstd saved). llama: RMSNorm, which saves x in fp32 (a copy
  // unless it is fp32), rstd and the normalised x in x's dtype; x^2 and the fp32 normalised x are
  // the op's temporaries. Returns the name of the tensor the backward reads as x.
  // `final_norm`: the model's last norm, filed as such; its input dies at the upcast (llama).
  Name norm_fwd(Name name, Name x, const Pass& pass, std::int64_t block, bool final_norm = false) {
    const bool fwd = !pass.replay && block >= 0;
    const MemoryComponent saved = final_norm ? kFinalNorm : saved_as(pass);
    const MemoryComponent stats = final_norm ? kFinalNorm : saved_as(pass, kStats);
    if (gpt_) {
      add(name + ".out", saved, rows(H_, w_));
      add(name + ".mean", stats, rows(1, 4));
      add(name + ".rstd", stats, rows(1, 4));
      at("layernorm", block, fwd);
      done(name + ".mean", pass);
      done(name + ".rstd", pass);
      return x;
    }
    Name norm_x = x;
    if (w_ != 4) {
      norm_x = name + ".x_f32";
      add(norm_x, saved, rows(H_, 4));
      at("rmsnorm input upcast", block, fwd);
      if (final_norm) drop(x);
    }
    // In the builder's order: the output and rstd, x^2 and the fp32 normalised x, the normalised x.
    add(name + ".out", saved, rows(H_, w_));
    add(name + ".rstd", stats, rows(1, 4));
    once(kTransient, rows(H_, 4));
    if (w_ != 4) once(kTransient, rows(H_, 4));
    add(name + ".normed", saved, rows(H_, w_));
    at("rmsnorm", block, fwd);
    if (norm_x != x) done(norm_x, pass);
    done(name + ".rstd", pass);
    done(name + ".normed", pass);
    return norm_x;
  }

  // What the backward of one block reads, by name.
  struct Block {
    std::int64_t l = 0;
    Name pre, x_in, norm1_x, norm2_x;
    Lin qkv, proj, fc, up, out;
    Name qkv_in;   // the qkv projection's output (llama: before RoPE)
    Name attn_in;  // what attention reads (llama: after RoPE)
    bool has_kv_cache = false, has_kv_repeat = false;
    Name probs, probs_c, probs_drop, values_in;
    Bytes scores_elem = 0, probs_elem = 0, probs_c_elem = 0;
    Name gelu_in;
    Bytes gelu_elem = 0;
  };

  Block block_fwd(std::int64_t l, Name x_in, const Pass& pass) {
    const bool fwd = !pass.replay;
    Block b;
    b.l = l;
    b.pre = Name(pass.replay ? "r" : "") + l + ".";
    Name pre = b.pre;
    b.x_in = x_in;
    const MemoryComponent role = saved_as(pass);

    // Norm 1 and the q|k|v projection.
    const Name norm1 = pre + "norm1";
    b.norm1_x = norm_fwd(norm1, x_in, pass, l);
    b.qkv_in = pre + "attn.qkv";
    // llama under autocast: q, k and v projections each cast the norm's output, two more 16-bit
    // copies beside the first, each saved by its projection.
    if (!gpt_ && amp_) with_gemm_.push_back({pre + "attn.qkv.in.autocast.kv", rows(2 * H_, e_)});
    b.qkv = linear_fwd(pre + "attn.qkv", H_, Q_, gpt_ || cfg_.model.qkv_bias, norm1 + ".out", w_,
                       b.qkv_in, gpt_ ? role : kTransient, pass, l);
    if (!b.qkv.x_cast) done(norm1 + ".out", pass);
    b.attn_in = b.qkv_in;
    if (!gpt_) {
      b.attn_in = pre + "attn.qkv_rot";
      add(b.attn_in, role, rows(Q_, e_));
      once(kTransient, rows(2 * (A_ + K_) * D_, amp_ ? 4 : e_));
      if (!has("rope.cos_sin")) add_fixed("rope.cos_sin", kSaved, checked_mul(2 * S_ * D_, w_, "cos"));
      at("rope", l, fwd);
      drop(b.qkv_in);
    }
    attention_fwd(b, pass);

    // Output projection, dropout, residual.
    const Name proj_out = pre + "attn.proj.out";
    b.proj = linear_fwd(pre + "attn.proj", H_, H_, gpt_, pre + "attn.y", e_, proj_out, kTransient,
                        pass, l);
    done(pre + "attn.y", pass);
    const Name residual = branch_dropout(proj_out, pre + "attn.proj", pass, l);
    add(pre + "x_mid", role, rows(H_, w_));
    at("residual add", l, fwd);
    drop(residual);
    // x_in: read again by the norm's backward where it is the norm's x (gpt; llama in fp32).
    done_block_input(x_in, pass, b.norm1_x == x_in);

    // Norm 2 and the MLP.
    const Name norm2 = pre + "norm2";
    b.norm2_x = norm_fwd(norm2, pre + "x_mid", pass, l);
    if (gpt_) {
      const Name fc_out = pre + "mlp.fc.out";
      b.fc = linear_fwd(pre + "mlp.fc", H_, F_, true, norm2 + ".out", w_, fc_out, role, pass, l);
      if (!b.fc.x_cast) done(norm2 + ".out", pass);
      // gelu_new: autocast (CUDA) runs its tanh branch in fp32 from an fp32 copy of x.
      b.gelu_in = fc_out;
      b.gelu_elem = e_;
      if (amp_) {
        b.gelu_in = pre + "mlp.fc.out.f32";
        b.gelu_elem = 4;
        add(b.gelu_in, role, rows(F_, 4));
        at("cast", l, fwd);
        drop(fc_out);
      }
      add(pre + "mlp.gelu.out", role, rows(F_, b.gelu_elem));
      add(pre + "mlp.gelu.tanh", role, rows(F_, b.gelu_elem));
      add(pre + "mlp.gelu.one_plus_tanh", role, rows(F_, b.gelu_elem));
      add(pre + "mlp.gelu.half_x", role, rows(F_, e_));
      once(kTransient, rows(2 * F_, b.gelu_elem));
      at("gelu", l, fwd);
      for (const char* piece : {"mlp.gelu.tanh", "mlp.gelu.one_plus_tanh", "mlp.gelu.half_x"})
        done(pre + piece, pass);
      done(b.gelu_in, pass);
      const Name mlp_out = pre + "mlp.proj.out";
      b.out = linear_fwd(pre + "mlp.proj", F_, H_, true, pre + "mlp.gelu.out", b.gelu_elem, mlp_out,
                         kTransient, pass, l);
      if (!b.out.x_cast) done(pre + "mlp.gelu.out", pass);
    } else {
      // Both read the norm's output; under autocast each casts it, the up projection last.
      b.fc = linear_fwd(pre + "mlp.gate", H_, F_, false, norm2 + ".out", w_, pre + "mlp.gate.out",
                        role, pass, l, false);
      b.up = linear_fwd(pre + "mlp.up", H_, F_, false, norm2 + ".out", w_, pre + "mlp.up.out", role,
                        pass, l);
      if (!b.up.x_cast) done(norm2 + ".out", pass);
      add(pre + "mlp.swiglu.out", role, rows(F_, e_));
      add(pre + "mlp.silu.out", role, rows(F_, e_));
      at("swiglu", l, fwd);
      done(pre + "mlp.gate.out", pass);
      done(pre + "mlp.up.out", pass);
      done(pre + "mlp.silu.out", pass);
      b.out = linear_fwd(pre + "mlp.down", F_, H_, false, pre + "mlp.swiglu.out", e_,
                         pre + "mlp.down.out", kTransient, pass, l);
      done(pre + "mlp.swiglu.out", pass);
    }
    const Name mlp_y =
        branch_dropout(gpt_ ? pre + "mlp.proj.out" : pre + "mlp.down.out", pre + "mlp", pass, l);
    // The block output: the next block's input, kept even when checkpointed; a replay's is read by
    // its add alone.
    const Name x_out = Name() + l + ".x_out";
    if (pass.replay)
      once(kRecomputed, rows(H_, w_));
    else
      add(x_out, kSaved, rows(H_, w_));
    at("residual add", l, fwd);
    drop(mlp_y);
    done(pre + "x_mid", pass, b.norm2_x == pre + "x_mid");
    return b;
  }

  // The block input after the residual add: the checkpointed forward's replay reads it again; in a
  // kept forward it stays only where the norm's backward reads it.
  void done_block_input(Name x_in, const Pass& pass, bool read_by_norm_bwd) {
    if (ckpt_ && !pass.replay) return;  // the replay reads it
    if (pass.replay && read_by_norm_bwd) return;
    if (!pass.replay && read_by_norm_bwd) return;
    drop(x_in);
  }

  void attention_fwd(Block& b, const Pass& pass) {
    const bool fwd = !pass.replay;
    const std::int64_t l = b.l;
    Name pre = b.pre;
    const MemoryComponent role = saved_as(pass);
    const bool cache = !ckpt_;
    // gpt2: the fused kernel reads the query in place; eager's matmul saves a copy (batch >= 2).
    const bool query_view = query_view_;
    std::vector<std::pair<Name, Bytes>> fwd_held;
    if (gpt_) {
      if (cache && query_view) {
        add(pre + "attn.kv_cache", role, rows(2 * H_, e_));
        b.has_kv_cache = true;
      }
      if (!query_view) fwd_held.push_back({pre + "attn.qkv_copies", rows(Q_, e_)});
    } else {
      if (cache) {
        fwd_held.push_back({pre + "attn.kv_cache", rows(2 * K_ * D_, e_)});
        add(fwd_held.back().first, kTransient, fwd_held.back().second);  // before the repeat
      }
      if (A_ > K_ && eager_) {
        add(pre + "attn.kv_repeat", role, rows(2 * (A_ - K_) * D_, e_));
        b.has_kv_repeat = true;
      }
    }
    if (gpt_)
      for (const auto& [name, bytes] : fwd_held) add(name, kTransient, bytes);
    const bool mask = eager_ || ckpt_;
    if (mask && !has("attn.causal_mask"))
      add("attn.causal_mask", kTransient, rows(S_, eager_ ? w_ : 1));
    if (!eager_) {
      add(pre + "attn.y", role, rows(H_, e_));
      add(pre + "attn.lse", saved_as(pass, kStats), rows(A_, 4));
      once_fixed(kWorkspace, kFlashEngineScratch);
      at("flash attention", l, fwd);
      for (const auto& [name, bytes] : fwd_held) drop(name);
      done(b.attn_in, pass);
      done(pre + "attn.lse", pass);
      if (b.has_kv_cache) done(pre + "attn.kv_cache", pass);
      after_mask_use(l, pass);
      return;
    }
    // Scores (fp32 where the mask is: the model's dtype), softmax, casts, dropout, values.
    b.scores_elem = w_ == 4 ? 4 : e_;
    workspace_on();
    add(pre + "attn.scores", kTransient, square(b.scores_elem));
    once(kTransient, square(e_));  // the product before scaling
    at("attention scores", l, fwd);
    after_mask_use(l, pass);
    const bool f32_softmax = !gpt_ || amp_;
    b.probs_elem = f32_softmax ? 4 : b.scores_elem;
    b.probs = pre + "attn.probs";
    add(b.probs, role, square(b.probs_elem));
    if (b.scores_elem != b.probs_elem) once(kTransient, square(4));
    at("softmax", l, fwd);
    drop(pre + "attn.scores");
    const bool cast_late = amp_ && !gpt_;
    b.probs_c = b.probs;
    b.probs_c_elem = b.probs_elem;
    if (!cast_late && b.probs_elem != e_) {
      b.probs_c = pre + "attn.probs_c";
      b.probs_c_elem = e_;
      add(b.probs_c, role, square(e_));
      at("cast", l, fwd);
      if (!kept(pass)) drop(b.probs);  // the checkpointed forward: the cast read it last
    }
    Name values_in = b.probs_c;
    Bytes values_elem = b.probs_c_elem;
    if (dropout_) {
      b.probs_drop = pre + "attn.probs_drop";
      add(b.probs_drop, cast_late ? kTransient : role, square(b.probs_c_elem));
      add(pre + "attn.probs_mask", role, square(1));
      at("dropout", l, fwd);
      if (b.probs_c != b.probs) drop(b.probs_c);  // read by the dropout alone
      else if (!kept(pass)) drop(b.probs);
      done(pre + "attn.probs_mask", pass);
      values_in = b.probs_drop;
    }
    b.values_in = values_in;
    if (values_elem != e_) {
      b.values_in = pre + "attn.values_in";
      add(b.values_in, role, square(e_));
      at("cast", l, fwd);
      if (values_in != b.probs) drop(values_in);  // the dropped copy, read by the cast alone
      else if (!kept(pass)) drop(b.probs);
    }
    add(pre + "attn.y", role, rows(H_, e_));
    once(kTransient, rows(H_, e_));  // [B, A, S, D] before transpose().contiguous()
    at("attention values", l, fwd);
    for (const auto& [name, bytes] : fwd_held) drop(name);
    done(b.values_in, pass);
    if (b.values_in != b.probs && has(b.probs)) done(b.probs, pass);
    done(b.attn_in, pass);
    if (b.has_kv_repeat) done(pre + "attn.kv_repeat", pass);
  }

  // The causal mask lives while a layer may still read it: through the forward, and with
  // checkpointing through the replay of block 0.
  void after_mask_use(std::int64_t l, const Pass& pass) {
    if (!has("attn.causal_mask")) return;
    const bool last = ckpt_ ? (pass.replay && l == 0) : (l == L_ - 1);
    if (last) drop("attn.causal_mask");
  }

  void forward() {
    // Embedding (and gpt's token and position embeddings apart before their sum).
    Name x0 = "x0";
    if (dropout_ && gpt_) {
      add("embed.out", kTransient, rows(H_, w_));
      once(kTransient, rows(H_, w_));
      at("embedding");
      add("x0", kSaved, rows(H_, w_));
      add("embed.mask", kEmbedMask, rows(H_, 1));
      at("embedding dropout");
      drop("embed.out");
    } else {
      add("x0", kSaved, rows(H_, w_));
      if (gpt_) once(kTransient, rows(H_, w_));
      at("embedding");
    }
    Pass pass;
    pass.keep = !ckpt_;
    Name x = x0;
    for (std::int64_t l = 0; l < L_; ++l) {
      blocks_.push_back(block_fwd(l, x, pass));
      x = Name() + l + ".x_out";
    }
    // The final block output: filed as such from here.
    retag(x, kFinalBlockOutput);
    final_x_ = norm_fwd("final_norm", x, Pass{}, -1, true);
    lm_ = linear_fwd("lm_head", H_, V_, false, "final_norm.out", w_, "logits", kLogits, Pass{}, -1);
    // The loss: logits.float(), then cross entropy, which keeps its log-softmax beside it.
    logits_f32_ = "logits";
    if (e_ != 4) {
      logits_f32_ = "logits.f32";
      add(logits_f32_, kLogits, rows(V_, 4));
      at("logits cast");
    }
    once_fixed(kLogits, held(4, own_));  // the loss
    add("ce.lse", kLogits, rows(1, 4));
    once(kLogits, rows(V_, 4));
    at("cross-entropy");
    if (logits_f32_ != "logits") drop("logits");
    // Autocast's cache ends with the autocast region.
    for (const auto& [name, saved] : cache_)
      if (!saved) drop(name);
    cache_.clear();
  }

  void retag(Name name, MemoryComponent c) {
    for (Entry& e : live_)
      if (e.name == name) {
        uncount(e);
        e.component = c;
        count(e);
      }
  }

  // ---- backward -----------------------------------------------------------------------------

  // Backward of a linear from dy: dx (cast back to the input's dtype under autocast), the weight's
  // and bias's gradients (autocast: of the 16-bit copies, cast to the fp32 .grad). Returns dx.
  Name linear_bwd(const Lin& lin, Name dy, bool drop_dy, bool drop_x, std::int64_t block,
                  Name dx_name) {
    const Name dx = lin.x_cast ? lin.name + ".dx16" : dx_name;
    add(dx, kTransient, rows(lin.in, e_));
    const Bytes w_numel = checked_mul(lin.in, lin.out, "linear");
    if (amp_) {
      add_fixed(lin.name + ".dw16", kGradients, param(w_numel, e_));
      if (lin.bias) add_fixed(lin.name + ".db16", kGradients, param(lin.out, e_));
    } else {
      write_grad(w_numel);
      if (lin.bias) write_grad(lin.out);
    }
    workspace_on();
    at("linear backward", block);
    if (drop_dy) drop(dy);
    if (drop_x) drop(lin.x);
    if (amp_) drop(lin.name + ".w.autocast");
    if (amp_) {
      write_grad(w_numel);
      at("weight gradient cast", block);
      drop(lin.name + ".dw16");
      if (lin.bias) {
        write_grad(lin.out);
        at("bias gradient cast", block);
        drop(lin.name + ".db16");
      }
    }
    if (!lin.x_cast) return dx;
    add(dx_name, kTransient, rows(lin.in, lin.x_orig_elem));
    at("input gradient cast", block);
    drop(dx);
    return dx_name;
  }

  // Norm backward from dy into dx (a new tensor the size of x).
  void norm_bwd(Name name, Name dy, Name norm_x, Name x, Name dx, std::int64_t block) {
    if (gpt_) {
      add(dx, kTransient, rows(H_, w_));
      write_grad(H_);
      write_grad(H_);
      workspace_on();
      at("layernorm backward", block);
      drop(dy);
      drop(x);
      drop(name + ".mean");
      drop(name + ".rstd");
      return;
    }
    const bool upcast = norm_x != x;
    const Name dx_f32 = upcast ? name + ".dx_f32" : dx;
    add(dx_f32, kTransient, rows(H_, upcast ? 4 : w_));
    // The op's scratch, then (accumulating) the new gradient: the builder's order.
    once(kTransient, rows(2 * H_, 4));
    write_grad(H_);
    at("rmsnorm backward", block);
    drop(dy);
    drop(norm_x);
    drop(name + ".rstd");
    drop(name + ".normed");
    if (upcast) {
      add(dx, kTransient, rows(H_, w_));
      at("cast", block);
      drop(dx_f32);
    }
  }

  Name attention_bwd(const Block& b, Name dy) {
    const std::int64_t l = b.l;
    Name pre = b.pre;
    const Name dqkv = pre + "d.attn_in";
    add(dqkv, kTransient, rows(Q_, e_));
    if (!eager_) {
      const Bytes fixed = flash_bwd_scratch_bytes(0, S_, A_, K_, D_, cdt_);
      // One tensor: its fixed part is filed as workspace, the rest as a transient.
      const Bytes per_sample = flash_bwd_scratch_bytes(1, S_, A_, K_, D_, cdt_) - fixed;
      const std::int32_t slot = allocate_with_op(fixed, per_sample, kOutput);
      once_.push_back({{}, kWorkspace, true, fixed, slot});
      once_.push_back({{}, kTransient, false, per_sample, -1});
      at("flash attention backward", l);
      drop(dy);
      drop(b.attn_in);
      drop(pre + "attn.y");
      drop(pre + "attn.lse");
      if (b.has_kv_cache) drop(pre + "attn.kv_cache");
      return dqkv;
    }
    const Name dvalues = pre + "d.values_in";
    add(dvalues, kTransient, square(e_));
    workspace_on();
    at("attention values backward", l);
    drop(dy);
    // What the forward's core saved besides its operands, the values backward holds last.
    if (b.has_kv_cache) drop(pre + "attn.kv_cache");
    if (b.has_kv_repeat) drop(pre + "attn.kv_repeat");
    if (b.values_in != b.probs) drop(b.values_in);
    const Name dropped = !b.probs_drop.empty() ? b.probs_drop : b.probs_c;
    Name ddropped = dvalues;
    if (dropped != b.values_in) {
      ddropped = pre + "d.dropped";
      add(ddropped, kTransient, square(b.probs_c_elem));
      at("cast", l);
      drop(dvalues);
    }
    Name dprobs_c = ddropped;
    if (dropout_) {
      dprobs_c = pre + "d.probs_c";
      add(dprobs_c, kTransient, square(b.probs_c_elem));
      at("attention dropout backward", l);
      drop(ddropped);
      drop(pre + "attn.probs_mask");
    }
    Name dprobs = dprobs_c;
    if (b.probs_c != b.probs) {
      dprobs = pre + "d.probs";
      add(dprobs, kTransient, square(b.probs_elem));
      at("cast", l);
      drop(dprobs_c);
    }
    add(pre + "d.scores", kTransient, square(b.scores_elem));
    at("softmax backward", l);
    drop(dprobs);
    drop(b.probs);
    at("attention scores backward", l);
    drop(pre + "d.scores");
    drop(b.attn_in);
    return dqkv;
  }

  // The dropout on a residual branch's output `out` (gpt2): `site`.drop, and `site`.mask saved
  // for the backward; returns what the residual adds.
  Name branch_dropout(Name out, Name site, const Pass& pass, std::int64_t block) {
    if (!dropout_ || !gpt_) return out;
    add(site + ".drop", kTransient, rows(H_, e_));
    add(site + ".mask", saved_as(pass), rows(H_, 1));
    at("dropout", block, !pass.replay);
    drop(out);
    done(site + ".mask", pass);
    return site + ".drop";
  }

  // The residual's gradient entering a branch (`name`: mlp or proj) of block `b`: in the compute
  // dtype, then through the branch's dropout (gpt2, `mask`), recorded as `dropout_op`.
  Name branch_grad(const Block& b, Name dx, std::string_view name, std::string_view mask,
                   std::string_view dropout_op) {
    Name d = dx;
    if (w_ != e_) {
      d = b.pre + "d." + name + ".y";
      add(d, kTransient, rows(H_, e_));
      at("cast", b.l);
    }
    if (dropout_ && gpt_) {
      add(b.pre + "d." + name + ".out", kTransient, rows(H_, e_));
      at(dropout_op, b.l);
      if (d != dx) drop(d);
      drop(b.pre + mask);
      d = b.pre + "d." + name + ".out";
    }
    return d;
  }

  // From the gradient of the block's output to the gradient of its input.
  Name block_bwd(const Block& b, Name dx_out) {
    const std::int64_t l = b.l;
    Name pre = b.pre;
    const Name dmlp = branch_grad(b, dx_out, "mlp", "mlp.mask", "mlp dropout backward");
    Name dnorm2_out;
    if (gpt_) {
      const Name dgelu_out = linear_bwd(b.out, dmlp, dmlp != dx_out, true, l, pre + "d.gelu.out");
      add(pre + "d.gelu.in", kTransient, rows(F_, b.gelu_elem));
      once(kTransient, rows(2 * F_, b.gelu_elem));
      at("gelu backward", l);
      drop(dgelu_out);
      drop(b.gelu_in);
      for (const char* piece : {"mlp.gelu.tanh", "mlp.gelu.one_plus_tanh", "mlp.gelu.half_x"})
        drop(pre + piece);
      Name dfc = pre + "d.gelu.in";
      if (b.gelu_elem != e_) {
        dfc = pre + "d.fc.out";
        add(dfc, kTransient, rows(F_, e_));
        at("cast", l);
        drop(pre + "d.gelu.in");
      }
      dnorm2_out = linear_bwd(b.fc, dfc, true, true, l, pre + "d.norm2.out");
    } else {
      const Name dswiglu = linear_bwd(b.out, dmlp, dmlp != dx_out, true, l, pre + "d.swiglu.out");
      add(pre + "d.gate", kTransient, rows(F_, e_));
      add(pre + "d.up", kTransient, rows(F_, e_));
      at("swiglu backward", l);
      drop(dswiglu);
      drop(pre + "mlp.gate.out");
      drop(pre + "mlp.up.out");
      drop(pre + "mlp.silu.out");
      // Without autocast the norm's output is both GEMMs' input: the gate's backward frees it.
      const Name dx_up = linear_bwd(b.up, pre + "d.up", true, b.up.x_cast, l, pre + "d.x.up");
      const Name dx_gate = linear_bwd(b.fc, pre + "d.gate", true, true, l, pre + "d.x.gate");
      dnorm2_out = pre + "d.norm2.out";
      add(dnorm2_out, kTransient, rows(H_, w_));
      at("add", l);
      drop(dx_gate);
      drop(dx_up);
    }
    const Name dnorm2_in = pre + "d.norm2.in";
    norm_bwd(pre + "norm2", dnorm2_out, b.norm2_x, pre + "x_mid", dnorm2_in, l);
    const Name dx_mid = pre + "d.x_mid";
    add(dx_mid, kTransient, rows(H_, w_));
    at("residual backward", l);
    drop(dx_out);
    drop(dnorm2_in);

    const Name dproj =
        branch_grad(b, dx_mid, "proj", "attn.proj.mask", "attention dropout backward");
    const Name dy = linear_bwd(b.proj, dproj, dproj != dx_mid, eager_, l, pre + "d.attn.y");
    Name dqkv = attention_bwd(b, dy);
    if (!gpt_) {
      add(pre + "d.qkv", kTransient, rows(Q_, e_));
      at("rope backward", l);
      drop(dqkv);
      dqkv = pre + "d.qkv";
      if (l == 0) drop("rope.cos_sin");
    }
    const Name dnorm1_out = linear_bwd_qkv(b, dqkv);
    const Name dnorm1_in = pre + "d.norm1.in";
    norm_bwd(pre + "norm1", dnorm1_out, b.norm1_x, b.x_in, dnorm1_in, l);
    // llama in 16 bits: the block input is not the norm's x; it was freed in the forward.
    const Name dx_in = Name() + l + ".d.x_in";
    add(dx_in, kTransient, rows(H_, w_));
    at("residual backward", l);
    drop(dx_mid);
    drop(dnorm1_in);
    return dx_in;
  }

  // The q|k|v projection's backward; under autocast llama's two more input copies go with the
  // last op of it.
  Name linear_bwd_qkv(const Block& b, Name dqkv) {
    const bool more = !gpt_ && amp_;
    const Name out = linear_bwd(b.qkv, dqkv, true, true, b.l, b.pre + "d.norm1.out");
    if (more) drop(b.pre + "attn.qkv.in.autocast.kv");
    return out;
  }

  void backward() {
    // Loss backward: the log-softmax's gradient and the logits' (fp32) before the cast back.
    add("d.logits.f32", kTransient, rows(V_, 4));
    once(kTransient, rows(V_, 4));
    at("cross-entropy backward");
    drop(logits_f32_);
    drop("ce.lse");
    Name dlogits = "d.logits.f32";
    if (e_ != 4) {
      dlogits = "d.logits";
      add(dlogits, kTransient, rows(V_, e_));
      at("logits gradient cast");
      drop("d.logits.f32");
    }
    // A tied lm head's gradient waits in autograd's input buffer until the embedding's joins it.
    const bool tied = cfg_.model.tied_embeddings;
    Lin lm = lm_;
    if (tied) {
      // Written by the lm head backward (or its cast), not a .grad until the sum.
      const Name name = "wte.grad.lm_head";
      if (amp_) {
        // The builder makes the input's gradient first, then the 16-bit weight's.
        add(lm.x_cast ? "lm_head.dx16" : "d.final_norm.out", kTransient, rows(H_, e_));
        add_fixed("lm_head.dw16", kGradients, param(V_ * H_, e_));
        workspace_on();
        at("lm head linear backward");
        drop(dlogits);
        drop(lm.x);
        drop("lm_head.w.autocast");
        add_fixed(name, kGradients, param(V_ * H_, w_));
        at("weight gradient cast");
        drop("lm_head.dw16");
      } else {
        add_fixed(name, kGradients, param(V_ * H_, w_));
        add(lm.x_cast ? "lm_head.dx16" : "d.final_norm.out", kTransient, rows(H_, e_));
        workspace_on();
        at("lm head linear backward");
        drop(dlogits);
        drop(lm.x);
      }
      if (lm.x_cast) {
        add("d.final_norm.out", kTransient, rows(H_, lm.x_orig_elem));
        at("input gradient cast");
        drop("lm_head.dx16");
      }
    } else {
      linear_bwd(lm, dlogits, true, true, -1, "d.final_norm.out");
    }
    const Name x_last = Name() + (L_ - 1) + ".x_out";
    Name dx = "d.x_last";
    norm_bwd("final_norm", "d.final_norm.out", final_x_, x_last, dx, -1);

    for (std::int64_t l = L_ - 1; l >= 0; --l) {
      Block b = blocks_[static_cast<std::size_t>(l)];
      if (ckpt_) {
        Pass replay;
        replay.replay = true;
        b = block_fwd(l, b.x_in, replay);
      }
      dx = block_bwd(b, dx);
    }

    Name dembed = dx;
    if (dropout_ && gpt_) {
      add("d.embed.out", kTransient, rows(H_, w_));
      at("embedding dropout backward");
      drop(dx);
      drop("embed.mask");
      dembed = "d.embed.out";
    }
    if (tied)
      add_fixed("wte.grad.embedding", kGradients, param(V_ * H_, w_));
    else
      write_grad(V_ * H_);
    if (gpt_) write_grad(position_rows(cfg_.model, S_) * H_);
    workspace_on();
    at("embedding backward");
    drop(dembed);
    if (workspace_live_) drop("gemm.workspace");
    workspace_live_ = false;
    if (tied) {
      write_grad(V_ * H_);
      at("tied embedding gradient sum");
      drop("wte.grad.lm_head");
      drop("wte.grad.embedding");
    }
  }

  // torch AdamW (foreach on CUDA: sqrt(exp_avg_sq) of every parameter at once, a model-sized
  // list of temporaries) or SGD; without an optimizer the step ends with the gradients.
  void optimizer() {
    if (cfg_.optimizer == Optimizer::adamw)
      once_fixed(kOptimizerTemporaries, held(checked_mul(params_, w_, "foreach"), own_));
    at(end_of_step(cfg_));
  }

  const RunConfig& cfg_;
  Bytes S_ = 0, H_ = 0, A_ = 0, K_ = 0, D_ = 0, Q_ = 0, F_ = 0, V_ = 0, L_ = 0;
  DType cdt_ = DType::f32, wdt_ = DType::f32;
  Bytes e_ = 4, w_ = 4;
  bool amp_ = false, gpt_ = true, eager_ = false, dropout_ = false, ckpt_ = false, accum_ = false;
  bool own_ = false;
  bool query_view_ = true;  // attention saves the query as a view (build_common.h)
  Bytes context_ = 0, workspace_bytes_ = 0;
  bool workspace_live_ = false;
  Bytes weights_ = 0, state_ = 0, grads_ = 0, params_ = 0;
  std::vector<Entry> live_, once_;
  std::array<Bytes, kComponents> live_fixed_{}, live_per_sample_{};
  Bytes live_fixed_sum_ = 0, live_per_sample_sum_ = 0;
  TensorEvents* events_ = nullptr;
  std::vector<Pending> pending_;
  std::int32_t next_slot_ = 0;
  std::vector<std::pair<Name, bool>> cache_;
  std::vector<std::pair<Name, Bytes>> with_gemm_;  // held by the next linear's GEMM, saved
  std::vector<Block> blocks_;
  Lin lm_;
  Name final_x_, logits_f32_;
  std::vector<Candidate> frontier_;  // the points that may be a peak, in the step's order
  Candidate last_;                   // the latest point
  std::int64_t ops_seen_ = 0;
};

}  // namespace

std::vector<Point> walk_hf(const RunConfig& cfg, const DeviceOverhead& overhead,
                          TensorEvents* events, std::int64_t batch) {
  return HfWalk(cfg, overhead, events, batch).run();
}

}  // namespace vrambench::estimate_walk
