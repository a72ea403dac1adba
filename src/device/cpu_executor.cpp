// CpuExecutor: binds an op's tensors to fp32 copies, runs the reference kernel, stores the outputs
// rounded to their dtypes (adding into `grad` outputs when the op accumulates).
#include "device/cpu_executor.h"

#include <cmath>
#include <cstring>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "common/init.h"
#include "common/math.h"
#include "core/error.h"
#include "cpu/ops.h"
#include "cpu/quant.h"
#include "device/init.h"
#include "op/operands.h"

namespace vrambench {
namespace {

// ---- loading and storing
// --------------------------------------------------------------------------------------

std::vector<float> load(const Operand& b) {
  const std::int64_t n = b.tensor->elements();
  std::vector<float> values(static_cast<std::size_t>(n));
  if (b.tensor->dtype == DType::f32) {
    std::memcpy(values.data(), b.data, static_cast<std::size_t>(n) * sizeof(float));
    return values;
  }
  for (std::int64_t i = 0; i < n; ++i)
    values[static_cast<std::size_t>(i)] = kmath::load(b.data, b.tensor->dtype, i);
  return values;
}

std::vector<std::int32_t> load_ids(const Operand& b) {
  if (b.tensor->dtype != DType::i32)
    throw InternalError("tensor '" + b.tensor->name + "' should hold i32 ids");
  std::vector<std::int32_t> ids(static_cast<std::size_t>(b.tensor->elements()));
  std::memcpy(ids.data(), b.data, ids.size() * sizeof(std::int32_t));
  return ids;
}

void store(const Operand& b, const std::vector<float>& values, bool accumulate) {
  const std::int64_t n = b.tensor->elements();
  if (static_cast<std::int64_t>(values.size()) != n)
    throw InternalError("tensor '" + b.tensor->name + "': kernel produced the wrong size");
  if (b.tensor->dtype == DType::f32 && !accumulate) {
    std::memcpy(b.data, values.data(), values.size() * sizeof(float));
    return;
  }
  for (std::int64_t i = 0; i < n; ++i) {
    float v = values[static_cast<std::size_t>(i)];
    if (accumulate) v += kmath::load(b.data, b.tensor->dtype, i);
    kmath::store(b.data, b.tensor->dtype, i, v);
  }
}

// Output k of the op, added into it when the op accumulates into a gradient.
void store_out(const Operands& a, std::size_t k, const std::vector<float>& values) {
  const Operand& o = a.out.at(k);
  store(o, values, a.accumulates(o));
}

std::vector<float> zeros_like(const Operand& b) {
  return std::vector<float>(static_cast<std::size_t>(b.tensor->elements()), 0.0f);
}

// A norm's weight as its kernel applies it: w + norm_offset (Gemma's 1 + w).
std::vector<float> offset_weight(const Operand& w, const Op& op) {
  std::vector<float> values = load(w);
  if (op.norm_offset != 0.0f)
    for (float& v : values) v += op.norm_offset;
  return values;
}

cpu::AttnShape attn_shape(const Operands& a) {
  const QkvShape s = attention_shape(a);
  return {s.batch, s.seq, s.heads, s.kv_heads, s.head_dim};
}

// ---- the executor
// -----------------------------------------------------------------------------------

class CpuExecutor final : public Executor {
 public:
  CpuExecutor(std::uint64_t seed, InputFiller fill) : seed_(seed), fill_(std::move(fill)) {}

  std::string_view name() const override { return "cpu"; }

  void initialize(const Program& program, int tensor_id, void* data) override {
    const Tensor& t = program.tensor(tensor_id);
    if (t.role == Role::input && fill_ && fill_(program, t, data)) return;
    if (const auto part = quantized_part(program, tensor_id)) {
      fill_quantized_part(program, tensor_id, *part, seed_, data);
      return;
    }
    const kmath::InitRule rule = init_rule(program, tensor_id, seed_);
    for (std::int64_t i = 0; i < t.elements(); ++i) kmath::init_element(data, t.dtype, rule, i);
  }

  void execute(const Program& program, std::size_t op_index,
               const std::vector<void*>& data) override {
    run(decode_operands(program, op_index, data));
  }

 private:
  void run(const Operands& a) {
    const Op& op = a.op;
    switch (op.kind) {
      case OpKind::embedding_fwd: {
        const EmbeddingDims d = embedding_dims(a);
        const auto ids = load_ids(a.in[0]);
        const auto w = load(a.in[1]);
        std::vector<float> wpe;
        if (const Operand* positions = a.input("wpe")) {
          a.require(d.P >= d.S, "wpe has fewer rows than positions");
          wpe = load(*positions);
        }
        auto x = zeros_like(a.out[0]);
        a.require(static_cast<std::int64_t>(x.size()) == d.B * d.S * d.H, "x must be [B,S,H]");
        cpu::embedding_fwd(x.data(), ids.data(), w.data(), wpe.empty() ? nullptr : wpe.data(), d.B,
                           d.S, d.V, d.H);
        if (op.embed_scale != 1.0f)
          for (float& v : x) v *= op.embed_scale;
        store_out(a, 0, x);
        return;
      }
      case OpKind::embedding_bwd: {
        const EmbeddingDims d = embedding_dims(a);
        const Operand* dwpe = a.output("dwpe");
        auto dx = load(a.in[0]);
        if (op.embed_scale != 1.0f)
          for (float& v : dx) v *= op.embed_scale;
        const auto ids = load_ids(a.in[1]);
        auto g_wte = zeros_like(a.out[0]);
        std::vector<float> g_wpe;
        if (dwpe) {
          g_wpe = zeros_like(*dwpe);
          a.require(d.P >= d.S, "dwpe has fewer rows than positions");
        }
        cpu::embedding_bwd(g_wte.data(), g_wpe.empty() ? nullptr : g_wpe.data(), dx.data(),
                           ids.data(), d.B, d.S, d.V, d.P, d.H);
        store_out(a, 0, g_wte);
        // Only the token table is ever tied (to the lm head, whose backward wrote its gradient
        // first); the position table's gradient has no earlier writer, so `accumulate` never
        // applies to it.
        if (dwpe) store(*dwpe, g_wpe, false);
        return;
      }
      case OpKind::layernorm_fwd: {
        const std::int64_t H = last_dim(a.in[0]), M = rows(a.in[0]);
        const auto x = load(a.in[0]), w = load(a.in[1]);
        const auto b = a.in.size() == 3 ? load(a.in[2]) : std::vector<float>{};
        auto y = zeros_like(a.out[0]), mean = zeros_like(a.out[1]), rstd = zeros_like(a.out[2]);
        cpu::layernorm_fwd(y.data(), mean.data(), rstd.data(), x.data(), w.data(),
                           b.empty() ? nullptr : b.data(), M, H, op.eps);
        store_out(a, 0, y);
        store_out(a, 1, mean);
        store_out(a, 2, rstd);
        return;
      }
      case OpKind::layernorm_bwd: {
        const std::int64_t H = last_dim(a.in[1]), M = rows(a.in[1]);
        const auto dy = load(a.in[0]), x = load(a.in[1]), w = load(a.in[2]);
        const auto mean = load(a.in[3]), rstd = load(a.in[4]);
        auto dx = zeros_like(a.out[0]);
        std::vector<float> dw(static_cast<std::size_t>(H)), db(static_cast<std::size_t>(H));
        cpu::layernorm_bwd(dx.data(), dw.data(), db.data(), dy.data(), x.data(), w.data(),
                           mean.data(), rstd.data(), M, H);
        store_out(a, 0, dx);
        if (a.out.size() >= 2) store_out(a, 1, dw);  // a frozen norm writes dx alone
        if (a.out.size() == 3) store_out(a, 2, db);
        return;
      }
      case OpKind::rmsnorm_fwd: {
        const std::int64_t H = last_dim(a.in[0]), M = rows(a.in[0]);
        const auto x = load(a.in[0]), w = offset_weight(a.in[1], op);
        auto y = zeros_like(a.out[0]), rstd = zeros_like(a.out[1]);
        cpu::rmsnorm_fwd(y.data(), rstd.data(), x.data(), w.data(), M, H, op.eps);
        store_out(a, 0, y);
        store_out(a, 1, rstd);
        return;
      }
      case OpKind::rmsnorm_bwd: {
        const std::int64_t H = last_dim(a.in[1]), M = rows(a.in[1]);
        const auto dy = load(a.in[0]), x = load(a.in[1]), rstd = load(a.in[3]);
        const auto w = offset_weight(a.in[2], op);
        auto dx = zeros_like(a.out[0]);
        std::vector<float> dw(static_cast<std::size_t>(H));
        cpu::rmsnorm_bwd(dx.data(), dw.data(), dy.data(), x.data(), w.data(), rstd.data(), M, H);
        store_out(a, 0, dx);
        if (a.out.size() == 2) store_out(a, 1, dw);  // a frozen norm writes dx alone
        return;
      }
      case OpKind::qk_norm_fwd: {
        const cpu::AttnShape s = attn_shape(a);
        const auto qkv = load(a.in[0]);
        const auto qw = offset_weight(a.in[1], op), kw = offset_weight(a.in[2], op);
        auto y = zeros_like(a.out[0]), rstd = zeros_like(a.out[1]);
        a.require(static_cast<std::int64_t>(rstd.size()) == s.B * s.S * (s.A + s.K),
                  "rstd must be [B,S,A+K]");
        cpu::qk_norm_fwd(y.data(), rstd.data(), qkv.data(), qw.data(), kw.data(), s.B * s.S, s.A,
                         s.K, s.D, op.eps);
        store_out(a, 0, y);
        store_out(a, 1, rstd);
        return;
      }
      case OpKind::qk_norm_bwd: {
        const cpu::AttnShape s = attn_shape(a);
        const auto dy = load(a.in[0]), qkv = load(a.in[1]), rstd = load(a.in[4]);
        const auto qw = offset_weight(a.in[2], op), kw = offset_weight(a.in[3], op);
        auto dqkv = zeros_like(a.out[0]);
        std::vector<float> dqw(static_cast<std::size_t>(s.D)), dkw(dqw.size());
        cpu::qk_norm_bwd(dqkv.data(), dqw.data(), dkw.data(), dy.data(), qkv.data(), qw.data(),
                         kw.data(), rstd.data(), s.B * s.S, s.A, s.K, s.D);
        store_out(a, 0, dqkv);
        if (a.out.size() == 3) {  // frozen norms write dqkv alone
          store_out(a, 1, dqw);
          store_out(a, 2, dkw);
        }
        return;
      }
      case OpKind::softcap_fwd: {
        const auto x = load(a.in[0]);
        auto y = zeros_like(a.out[0]);
        cpu::softcap_fwd(y.data(), x.data(), static_cast<std::int64_t>(x.size()), op.softcap);
        store_out(a, 0, y);
        return;
      }
      case OpKind::softcap_bwd: {
        const auto dy = load(a.in[0]), y = load(a.in[1]);
        auto dx = zeros_like(a.out[0]);
        cpu::softcap_bwd(dx.data(), dy.data(), y.data(), static_cast<std::int64_t>(y.size()),
                         op.softcap);
        store_out(a, 0, dx);
        return;
      }
      case OpKind::linear_fwd: {
        const LinearDims d = linear_dims(a);
        const auto x = load(a.in[0]), w = load(a.in[1]);
        const auto b = a.in.size() == 3 ? load(a.in[2]) : std::vector<float>{};
        auto y = zeros_like(a.out[0]);
        cpu::linear_fwd(y.data(), x.data(), w.data(), b.empty() ? nullptr : b.data(), d.M, d.In,
                        d.Out);
        store_out(a, 0, y);
        return;
      }
      case OpKind::linear_bwd: {
        const LinearDims d = linear_dims(a);
        const auto dy = load(a.in[0]), x = load(a.in[1]), w = load(a.in[2]);
        auto dx = zeros_like(a.out[0]), dw = zeros_like(a.out[1]);
        std::vector<float> db(static_cast<std::size_t>(d.Out));
        cpu::linear_bwd(dx.data(), dw.data(), db.data(), dy.data(), x.data(), w.data(), d.M, d.In,
                        d.Out);
        store_out(a, 0, dx);
        store_out(a, 1, dw);
        if (a.out.size() == 3) store_out(a, 2, db);
        return;
      }
      case OpKind::gelu_fwd: {
        const auto x = load(a.in[0]);
        auto y = zeros_like(a.out[0]);
        cpu::gelu_fwd(y.data(), x.data(), static_cast<std::int64_t>(x.size()));
        store_out(a, 0, y);
        return;
      }
      case OpKind::gelu_bwd: {
        const auto dy = load(a.in[0]), x = load(a.in[1]);
        auto dx = zeros_like(a.out[0]);
        cpu::gelu_bwd(dx.data(), dy.data(), x.data(), static_cast<std::int64_t>(x.size()));
        store_out(a, 0, dx);
        return;
      }
      case OpKind::swiglu_fwd: {
        const GateShape g = gate_shape(op, *a.out[0].tensor, *a.in[0].tensor);
        const auto gate = load(a.in[0]);
        auto y = zeros_like(a.out[0]);
        if (g.packed) {  // row r: gate columns [0, F), up columns [F, 2F) of gate|up
          for (std::int64_t r = 0; r < g.rows; ++r)
            cpu::swiglu_fwd(y.data() + r * g.width, gate.data() + 2 * r * g.width,
                            gate.data() + (2 * r + 1) * g.width, g.width, op.gelu_gate);
        } else {
          const auto up = load(a.in[1]);
          cpu::swiglu_fwd(y.data(), gate.data(), up.data(), static_cast<std::int64_t>(y.size()),
                          op.gelu_gate);
        }
        store_out(a, 0, y);
        return;
      }
      case OpKind::swiglu_bwd: {
        const GateShape g = gate_shape(op, *a.in[0].tensor, *a.in[1].tensor);
        const auto dy = load(a.in[0]), gate = load(a.in[1]);
        auto dgate = zeros_like(a.out[0]);
        if (g.packed) {
          for (std::int64_t r = 0; r < g.rows; ++r) {
            const std::int64_t at = 2 * r * g.width;
            cpu::swiglu_bwd(dgate.data() + at, dgate.data() + at + g.width, dy.data() + r * g.width,
                            gate.data() + at, gate.data() + at + g.width, g.width, op.gelu_gate);
          }
          store_out(a, 0, dgate);
          return;
        }
        const auto up = load(a.in[2]);
        auto dup = zeros_like(a.out[1]);
        cpu::swiglu_bwd(dgate.data(), dup.data(), dy.data(), gate.data(), up.data(),
                        static_cast<std::int64_t>(dy.size()), op.gelu_gate);
        store_out(a, 0, dgate);
        store_out(a, 1, dup);
        return;
      }
      case OpKind::rope_fwd:
      case OpKind::rope_bwd: {
        const cpu::AttnShape s = attn_shape(a);
        const auto in = load(a.in[0]);
        auto out = zeros_like(a.out[0]);
        if (op.kind == OpKind::rope_fwd)
          cpu::rope_fwd(out.data(), in.data(), s.B, s.S, s.A, s.K, s.D);
        else
          cpu::rope_bwd(out.data(), in.data(), s.B, s.S, s.A, s.K, s.D);
        store_out(a, 0, out);
        return;
      }
      case OpKind::attn_scores: {
        const cpu::AttnShape s = attn_shape(a);
        a.require(a.out[0].tensor->elements() == s.B * s.A * s.S * s.S, "scores must be [B,A,S,S]");
        const auto qkv = load(a.in[0]);
        auto scores = zeros_like(a.out[0]);
        cpu::attn_scores(scores.data(), qkv.data(), s);
        store_out(a, 0, scores);
        return;
      }
      case OpKind::softmax_fwd: {
        const auto scores = load(a.in[0]);
        auto probs = zeros_like(a.out[0]);
        cpu::softmax_fwd(probs.data(), scores.data(), rows(a.in[0]), last_dim(a.in[0]));
        store_out(a, 0, probs);
        return;
      }
      case OpKind::softmax_bwd: {
        const auto dprobs = load(a.in[0]), probs = load(a.in[1]);
        auto dscores = zeros_like(a.out[0]);
        cpu::softmax_bwd(dscores.data(), dprobs.data(), probs.data(), rows(a.in[1]),
                         last_dim(a.in[1]));
        store_out(a, 0, dscores);
        return;
      }
      case OpKind::attn_values: {
        const cpu::AttnShape s = attn_shape(a);
        a.require(a.in[0].tensor->elements() == s.B * s.A * s.S * s.S, "probs must be [B,A,S,S]");
        a.require(a.out[0].tensor->elements() == s.B * s.S * s.A * s.D, "y must be [B,S,A*D]");
        const auto probs = load(a.in[0]), qkv = load(a.in[1]);
        auto y = zeros_like(a.out[0]);
        cpu::attn_values(y.data(), probs.data(), qkv.data(), s);
        store_out(a, 0, y);
        return;
      }
      case OpKind::attn_values_bwd: {
        const cpu::AttnShape s = attn_shape(a);
        const auto dy = load(a.in[0]), probs = load(a.in[1]), qkv = load(a.in[2]);
        auto dprobs = zeros_like(a.out[0]), dqkv = zeros_like(a.out[1]);
        cpu::attn_values_bwd(dprobs.data(), dqkv.data(), dy.data(), probs.data(), qkv.data(), s);
        store_out(a, 0, dprobs);
        store_out(a, 1, dqkv);
        return;
      }
      case OpKind::attn_scores_bwd: {
        const cpu::AttnShape s = attn_shape(a);
        const auto dscores = load(a.in[0]), qkv = load(a.in[1]);
        auto dqkv = load(a.in[2]);  // its v part, written by attn_values_bwd, is kept
        cpu::attn_scores_bwd(dqkv.data(), dscores.data(), qkv.data(), s);
        store_out(a, 0, dqkv);
        return;
      }
      case OpKind::flash_fwd: {
        const cpu::AttnShape s = attn_shape(a);
        a.require(a.out[1].tensor->elements() == s.B * s.A * s.S, "lse must be [B,A,S]");
        const auto qkv = load(a.in[0]);
        auto y = zeros_like(a.out[0]), lse = zeros_like(a.out[1]);
        cpu::flash_fwd(y.data(), lse.data(), qkv.data(), s, static_cast<float>(op.dropout_p),
                       op.seed, op.softcap);
        store_out(a, 0, y);
        store_out(a, 1, lse);
        return;
      }
      case OpKind::flash_bwd: {
        const cpu::AttnShape s = attn_shape(a);
        const auto dy = load(a.in[0]), qkv = load(a.in[1]), y = load(a.in[2]), lse = load(a.in[3]);
        auto dqkv = zeros_like(a.out[0]);
        cpu::flash_bwd(dqkv.data(), dy.data(), qkv.data(), y.data(), lse.data(), s,
                       static_cast<float>(op.dropout_p), op.seed, op.softcap);
        store_out(a, 0, dqkv);
        return;
      }
      case OpKind::dropout_fwd: {
        const auto x = load(a.in[0]);
        auto y = zeros_like(a.out[0]), mask = zeros_like(a.out[1]);
        cpu::dropout_fwd(y.data(), mask.data(), x.data(), static_cast<std::int64_t>(x.size()),
                         static_cast<float>(op.dropout_p), op.seed);
        store_out(a, 0, y);
        store_out(a, 1, mask);
        return;
      }
      case OpKind::dropout_bwd: {
        const auto dy = load(a.in[0]), mask = load(a.in[1]);
        auto dx = zeros_like(a.out[0]);
        cpu::dropout_bwd(dx.data(), dy.data(), mask.data(), static_cast<std::int64_t>(dy.size()),
                         static_cast<float>(op.dropout_p));
        store_out(a, 0, dx);
        return;
      }
      case OpKind::add: {
        const auto x = load(a.in[0]), y = load(a.in[1]);
        a.require(x.size() == y.size(), "add operands differ in size");
        auto c = zeros_like(a.out[0]);
        cpu::add(c.data(), x.data(), y.data(), static_cast<std::int64_t>(c.size()));
        store_out(a, 0, c);
        return;
      }
      case OpKind::cross_entropy_fwd: {
        const std::int64_t V = last_dim(a.in[0]), M = rows(a.in[0]);
        a.require(a.in[1].tensor->elements() == M, "targets must have one id per logits row");
        const auto logits = load(a.in[0]);
        const auto targets = load_ids(a.in[1]);
        auto loss = zeros_like(a.out[0]), lse = zeros_like(a.out[1]);
        cpu::cross_entropy_fwd(loss.data(), lse.data(), logits.data(), targets.data(), M, V);
        store_out(a, 0, loss);
        store_out(a, 1, lse);
        return;
      }
      case OpKind::cross_entropy_bwd: {
        const std::int64_t V = last_dim(a.in[0]), M = rows(a.in[0]);
        const auto logits = load(a.in[0]);
        const auto targets = load_ids(a.in[1]);
        const auto lse = load(a.in[2]);
        auto dlogits = zeros_like(a.out[0]);
        cpu::cross_entropy_bwd(dlogits.data(), logits.data(), targets.data(), lse.data(), M, V,
                               op.grad_scale);
        store_out(a, 0, dlogits);
        return;
      }
      case OpKind::adamw_step:
      case OpKind::sgd_step:
        optimizer_step(a);
        return;
      case OpKind::dequantize:
        dequantize(a);
        return;
      case OpKind::linear_dgrad: {
        const LinearDims d = linear_dims(a);
        const auto dy = load(a.in[0]), w = load(a.in[1]);
        auto dx = zeros_like(a.out[0]);
        matmul(dx.data(), dy.data(), d.Out, 1, w.data(), d.In, 1, d.M, d.Out, d.In);
        store_out(a, 0, dx);
        return;
      }
      case OpKind::lora_fwd:
        lora_fwd(a);
        return;
      case OpKind::lora_bwd:
        lora_bwd(a);
        return;
      case OpKind::adamw8bit_step:
        adamw_8bit(a);
        return;
      case OpKind::cast:
        a.require(a.in[0].tensor->elements() == a.out[0].tensor->elements(),
                  "cast operands differ in size");
        store_out(a, 0, load(a.in[0]));
        return;
    }
    a.fail("unknown op kind");
  }

  // c[M,N] = sum over k of a(m, k) b(k, n), the operands read through their strides (row, column),
  // so a transpose is a swap of strides; accumulated in double.
  static void matmul(float* c, const float* a, std::int64_t a_row, std::int64_t a_col,
                     const float* b, std::int64_t b_row, std::int64_t b_col, std::int64_t M,
                     std::int64_t K, std::int64_t N) {
    for (std::int64_t m = 0; m < M; ++m)
      for (std::int64_t n = 0; n < N; ++n) {
        double sum = 0.0;
        for (std::int64_t k = 0; k < K; ++k)
          sum += static_cast<double>(a[m * a_row + k * a_col]) * b[k * b_row + n * b_col];
        c[m * N + n] = static_cast<float>(sum);
      }
  }

  // Rows [row_offset, +rows) of the compute-dtype weight from the quantised module.
  static void dequantize(const Operands& a) {
    const Op& op = a.op;
    const DequantizeOperands d = dequantize_operands(a);
    cpu::dequantize_weight(op.quant, op.double_quant, a.out[0].tensor->dtype, d.rows, d.in, op.rows,
                           d.cols);
  }

  // xa = x a^T; y[:, cols] += scale xa b^T (from xa as stored).
  static void lora_fwd(const Operands& a) {
    const Op& op = a.op;
    const LoraDims s = lora_dims(a);
    const auto x = load(a.in[0]), A = load(a.in[1]), B = load(a.in[2]);
    auto xa = zeros_like(a.out[0]);
    matmul(xa.data(), x.data(), s.In, 1, A.data(), 1, s.In, s.M, s.In, s.R);
    store(a.out[0], xa, false);
    xa = load(a.out[0]);
    std::vector<float> delta(static_cast<std::size_t>(s.M * s.N));
    matmul(delta.data(), xa.data(), s.R, 1, B.data(), 1, s.R, s.M, s.R, s.N);
    auto y = load(a.in[3]);
    for (std::int64_t m = 0; m < s.M; ++m)
      for (std::int64_t n = 0; n < s.N; ++n)
        y[static_cast<std::size_t>(m * s.Out + op.col_offset + n)] +=
            op.lora_scale * delta[static_cast<std::size_t>(m * s.N + n)];
    store(a.out[1], y, false);
  }

  // g = scale dy[:, cols]; db = g^T xa; dxa = g b; da = dxa^T x; dx (+)= dxa a. The adapter's
  // gradients are written; dx is added into the frozen base's when the op accumulates.
  static void lora_bwd(const Operands& a) {
    const Op& op = a.op;
    const LoraDims s = lora_dims(a);
    const auto dy = load(a.in[0]), x = load(a.in[1]), xa = load(a.in[2]), A = load(a.in[3]),
               B = load(a.in[4]);
    std::vector<float> g(static_cast<std::size_t>(s.M * s.N));
    for (std::int64_t m = 0; m < s.M; ++m)
      for (std::int64_t n = 0; n < s.N; ++n)
        g[static_cast<std::size_t>(m * s.N + n)] =
            op.lora_scale * dy[static_cast<std::size_t>(m * s.Out + op.col_offset + n)];
    auto dB = zeros_like(a.out[1]);
    matmul(dB.data(), g.data(), 1, s.N, xa.data(), s.R, 1, s.N, s.M, s.R);
    auto dxa = zeros_like(a.out[2]);
    matmul(dxa.data(), g.data(), s.N, 1, B.data(), s.R, 1, s.M, s.N, s.R);
    store(a.out[2], dxa, false);
    dxa = load(a.out[2]);  // as stored: what the CUDA GEMMs read
    auto dA = zeros_like(a.out[0]);
    matmul(dA.data(), dxa.data(), 1, s.R, x.data(), s.In, 1, s.R, s.M, s.In);
    store(a.out[0], dA, false);
    store(a.out[1], dB, false);
    if (a.out.size() == 4) {
      auto dx = zeros_like(a.out[3]);
      matmul(dx.data(), dxa.data(), s.R, 1, A.data(), s.In, 1, s.M, s.R, s.In);
      store(a.out[3], dx, op.accumulate);
    }
  }

  // bitsandbytes' 8-bit AdamW on the weight (or its master), in place on the codes and absmax.
  void adamw_8bit(const Operands& a) {
    const Operand& weight = a.in[0];
    const Operand* master = a.input("master");
    const kquant::AdamW8bitState state = adamw_8bit_state(a);
    auto param = load(master ? *master : weight);
    const auto grad = load(a.in[1]);
    const auto n = static_cast<std::int64_t>(param.size());
    cpu::adamw_8bit_step(param.data(), grad.data(), state, n,
                         adam_params(a.op, steps_.next(weight)));
    if (master) store(*master, param, false);
    store(weight, param, false);
  }

  // In place on the weight, its state and its master copy: the update runs in fp32 on the master
  // when there is one (then weight = round(master)), else on the weight's own values; the state
  // is stored rounded to its dtype. optimizer_operands checks the operands as the cuda executor
  // reads them.
  void optimizer_step(const Operands& a) {
    (void)optimizer_operands(a);
    const Operand& weight = a.in[0];
    const Operand* master = a.input("master");
    auto param = load(master ? *master : weight);
    const auto grad = load(a.in[1]);
    const int step = steps_.next(weight);
    const auto n = static_cast<std::int64_t>(param.size());
    if (a.op.kind == OpKind::adamw_step) {
      auto m = load(a.in[2]), v = load(a.in[3]);
      cpu::adamw_step(param.data(), grad.data(), m.data(), v.data(), n, adam_params(a.op, step));
      store(a.in[2], m, false);
      store(a.in[3], v, false);
    } else {
      auto momentum = load(a.in[2]);
      cpu::sgd_step(param.data(), grad.data(), momentum.data(), n, sgd_params(a.op));
      store(a.in[2], momentum, false);
    }
    if (master) store(*master, param, false);
    store(weight, param, false);  // rounds to the weight's dtype
  }

  std::uint64_t seed_;
  InputFiller fill_;
  OptimizerSteps steps_;
};

}  // namespace

std::unique_ptr<Executor> make_cpu_executor(std::uint64_t seed) {
  return make_cpu_executor(seed, {});
}

std::unique_ptr<Executor> make_cpu_executor(std::uint64_t seed, InputFiller fill_inputs) {
  return std::make_unique<CpuExecutor>(seed, std::move(fill_inputs));
}

}  // namespace vrambench
