// An op decoded for an executor: bound by its signature, and the figures read off its operands.
#include "op/operands.h"

#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <vector>

#include "core/error.h"
#include "core/quant_layout.h"

namespace vrambench {
namespace {

// The operand of `bound` at the place `listed` names `name`, or nullptr when the op has fewer:
// optional operands come last, so an op with k of them binds the first k.
template <std::size_t N>
const Operand* find(const Operands& a, const std::array<std::string_view, N>& listed,
                    const std::vector<Operand>& bound, std::string_view name,
                    std::string_view list) {
  for (std::size_t i = 0; i < N && !listed[i].empty(); ++i)
    if (operand_name(listed[i]) == name) return i < bound.size() ? &bound[i] : nullptr;
  a.fail(fmt::format("its signature lists no {} named '{}'", list, name));
}

// An operand the kind always has (check_op has counted them), by its name.
const Operand& input(const Operands& a, std::string_view name) {
  const Operand* o = a.input(name);
  if (o == nullptr) a.fail(fmt::format("has no input '{}'", name));
  return *o;
}
const Operand& output(const Operands& a, std::string_view name) {
  const Operand* o = a.output(name);
  if (o == nullptr) a.fail(fmt::format("has no output '{}'", name));
  return *o;
}

}  // namespace

const Operand* Operands::input(std::string_view name) const {
  return find(*this, signature(op.kind).inputs, in, name, "input");
}

const Operand* Operands::output(std::string_view name) const {
  return find(*this, signature(op.kind).outputs, out, name, "output");
}

void* Operands::typed(const Operand& o, DType dtype) const {
  if (o.tensor->dtype != dtype)
    fail(fmt::format("'{}' is {}, read as {}", o.tensor->name, dtype_name(o.tensor->dtype),
                     dtype_name(dtype)));
  return o.data;
}

void Operands::fail(std::string_view what) const {
  throw InternalError(fmt::format("op '{}' ({}): {}", op.name, to_string(op.kind), what));
}

Operands decode_operands(const Program& program, std::size_t op_index,
                         const std::vector<void*>& data) {
  const Op& op = program.ops.at(op_index);
  check_op(program, op);
  Operands a{program, op, {}, {}, {}, nullptr, 0};
  auto bind = [&](const TensorIds& ids, std::vector<Operand>& into) {
    into.reserve(ids.size());
    for (int id : ids) {
      const Tensor& t = program.tensor(id);
      void* p = data.at(static_cast<std::size_t>(id));
      if (p == nullptr && t.bytes > 0) a.fail(fmt::format("tensor '{}' is not bound", t.name));
      // check_op has seen that workspace tensors come last: skipping them keeps the order.
      if (t.role == Role::workspace) {
        a.workspace = p;
        a.workspace_bytes = t.bytes;
        continue;
      }
      into.push_back({&t, p});
    }
  };
  bind(op.inputs, a.in);
  bind(op.outputs, a.out);
  a.held.reserve(op.held.size());
  for (int id : op.held)
    a.held.push_back({&program.tensor(id), data.at(static_cast<std::size_t>(id))});
  return a;
}

const Operand* Operands::held_like(DType dtype, const Shape& shape) const {
  for (const Operand& h : held)
    if (h.tensor->dtype == dtype && h.tensor->shape == shape && h.data != nullptr) return &h;
  return nullptr;
}

DType Operands::dtype() const {
  const OpSignature& sig = signature(op.kind);
  for (std::size_t i = 0; i < out.size() && i < sig.outputs.size(); ++i)
    if (!of_free_dtype(sig.outputs[i])) return out[i].tensor->dtype;
  for (std::size_t i = 0; i < in.size() && i < sig.inputs.size(); ++i)
    if (!of_free_dtype(sig.inputs[i])) return in[i].tensor->dtype;
  return out.empty() ? in.at(0).tensor->dtype : out.at(0).tensor->dtype;
}

const Operand* operand_of_another_dtype(const Operands& a) {
  switch (a.op.kind) {
    case OpKind::cast:               // any floating dtype into any other, by design
    case OpKind::cross_entropy_fwd:  // the logits in whichever dtype the head wrote them
    case OpKind::dequantize:         // the quantisation's own codes and constants
    case OpKind::all_gather:         // a parameter's storage as it is (4-bit codes included), or
    case OpKind::reduce_scatter:     // cast on the way (mixed precision)
      return nullptr;
    default:
      break;
  }
  const OpSignature& sig = signature(a.op.kind);
  const DType dt = a.dtype();
  // The dtype the table gives an operand's name where it gives one ("mean[M] f32" in
  // layernorm_fwd makes layernorm_bwd's "mean" an fp32 one too; "mask u8", "tokens[B,S] i32"),
  // read off the table once: the first listing that types the name.
  static const std::vector<std::pair<std::string_view, std::string_view>> typed_names = [] {
    std::vector<std::pair<std::string_view, std::string_view>> names;
    auto add = [&](const auto& list) {
      for (std::string_view entry : list) {
        const std::string_view d = operand_dtype(entry);
        if (d.empty() || of_free_dtype(entry)) continue;
        const std::string_view name = operand_name(entry);
        if (std::none_of(names.begin(), names.end(),
                         [&](const auto& n) { return n.first == name; }))
          names.emplace_back(name, d);
      }
    };
    for (std::size_t k = 0; k < kOpKindCount; ++k) {
      add(signature(static_cast<OpKind>(k)).inputs);
      add(signature(static_cast<OpKind>(k)).outputs);
    }
    return names;
  }();
  auto allowed = [&](std::string_view listed, DType stored) {
    std::string_view d = operand_dtype(listed);
    if (d == "any") return is_floating(stored);
    if (!d.empty() && d.front() == '=') {
      const Operand* o = a.input(d.substr(1));
      return o != nullptr && o->tensor->dtype == stored;
    }
    if (d.empty()) {
      const auto typed = std::find_if(typed_names.begin(), typed_names.end(), [&](const auto& n) {
        return n.first == operand_name(listed);
      });
      if (typed == typed_names.end()) return stored == dt;
      d = typed->second;
    }
    return dtype_name(stored) == d;
  };
  auto scan = [&](const auto& listed, const std::vector<Operand>& bound) -> const Operand* {
    for (std::size_t i = 0; i < bound.size() && i < listed.size(); ++i)
      if (!allowed(listed[i], bound[i].tensor->dtype)) return &bound[i];
    return nullptr;
  };
  if (const Operand* o = scan(sig.inputs, a.in)) return o;
  return scan(sig.outputs, a.out);
}

bool mixes_dtypes(const Operands& a) {
  const OpSignature& sig = signature(a.op.kind);
  const DType dt = a.dtype();
  for (std::size_t k = 0; k < a.in.size() && k < sig.inputs.size(); ++k)
    if (of_free_dtype(sig.inputs[k]) && a.in[k].tensor->dtype != dt) return true;
  for (std::size_t k = 0; k < a.out.size() && k < sig.outputs.size(); ++k)
    if (of_free_dtype(sig.outputs[k]) && a.out[k].tensor->dtype != dt) return true;
  return false;
}

LinearDims linear_dims(const Operands& a) {
  const OpKind kind = a.op.kind;
  if (kind != OpKind::linear_fwd && kind != OpKind::linear_bwd && kind != OpKind::linear_dgrad)
    a.fail("not a linear op");
  const Tensor& w = *input(a, "w").tensor;
  a.require(w.shape.size() == 2, "w must be [Out,In]");
  LinearDims d;
  d.Out = w.shape[0];
  d.In = w.shape[1];
  // M from the activation each kind reads: x (In columns), or dy for linear_dgrad (Out columns).
  if (kind == OpKind::linear_fwd) {
    const std::int64_t x = input(a, "x").tensor->elements();
    d.M = x / d.In;
    a.require(d.M * d.In == x && output(a, "y").tensor->elements() == d.M * d.Out,
              "x [M,In] and y [M,Out] disagree with w");
  } else if (kind == OpKind::linear_bwd) {
    d.M = input(a, "x").tensor->elements() / d.In;
    a.require(input(a, "dy").tensor->elements() == d.M * d.Out, "dy must be [M,Out]");
  } else {
    const std::int64_t dy = input(a, "dy").tensor->elements();
    d.M = dy / d.Out;
    a.require(d.M * d.Out == dy && output(a, "dx").tensor->elements() == d.M * d.In,
              "dy [M,Out] and dx [M,In] disagree with w");
  }
  return d;
}

EmbeddingDims embedding_dims(const Operands& a) {
  const bool fwd = a.op.kind == OpKind::embedding_fwd;
  if (!fwd && a.op.kind != OpKind::embedding_bwd) a.fail("not an embedding op");
  const Tensor& tokens = *input(a, "tokens").tensor;
  const Tensor& table = *(fwd ? input(a, "wte") : output(a, "dwte")).tensor;
  if (tokens.shape.size() != 2 || table.shape.size() != 2)
    a.fail(fwd ? "tokens [B,S], wte [V,H]" : "tokens [B,S], dwte [V,H]");
  const Operand* positions = fwd ? a.input("wpe") : a.output("dwpe");
  return {tokens.shape[0], tokens.shape[1], table.shape[0], table.shape[1],
          positions ? positions->tensor->shape.at(0) : 0};
}

QkvShape attention_shape(const Operands& a) {
  const OpSignature& s = signature(a.op.kind);
  if (!s.attrs.heads) a.fail("not an attention op");
  std::size_t qkv = 0;
  for (std::size_t i = 0; i < s.inputs.size(); ++i)
    if (operand_name(s.inputs[i]) == "qkv") {
      qkv = i;
      break;
    }
  return qkv_shape(a.op, *a.in.at(qkv).tensor);
}

LoraDims lora_dims(const Operands& a) {
  const bool fwd = a.op.kind == OpKind::lora_fwd;
  if (!fwd && a.op.kind != OpKind::lora_bwd) a.fail("not a LoRA op");
  const Operand& x = input(a, "x");
  const Tensor& A = *input(a, "a").tensor;
  const Tensor& B = *input(a, "b").tensor;
  const Operand& y = input(a, fwd ? "y" : "dy");
  a.require(A.shape.size() == 2 && B.shape.size() == 2 && B.shape[1] == A.shape[0],
            "a must be [R,In] and b [N,R]");
  LoraDims d{0, A.shape[1], A.shape[0], B.shape[0], last_dim(y)};
  d.M = x.tensor->elements() / d.In;
  a.require(d.M * d.In == x.tensor->elements() && y.tensor->elements() == d.M * d.Out,
            "x [M,In] and y [M,Out] disagree with a");
  a.require(a.op.col_offset + d.N <= d.Out, "the adapter's columns run past y's");
  if (fwd)
    a.require(output(a, "y").data == y.data, "y is updated in place");
  else
    a.require(input(a, "xa").tensor->elements() == d.M * d.R, "xa must be [M,R]");
  return d;
}

namespace {

// A tensor's rows and last dimension, checked against the expected ones (0: any).
void expect_matrix(const Operands& a, const Operand& o, std::int64_t rows_wanted,
                   std::int64_t cols_wanted, std::string_view shape) {
  const bool ok = (rows_wanted == 0 || rows(o) == rows_wanted) &&
                  (cols_wanted == 0 || last_dim(o) == cols_wanted);
  if (!ok)
    a.fail(fmt::format("'{}' is [{},{}], not {} = [{},{}]", o.tensor->name, rows(o), last_dim(o),
                       shape, rows_wanted, cols_wanted));
}

// A stack of E matrices [E,Out,In].
void expect_stack(const Operands& a, const Operand& o, MoeDims& d) {
  const Shape& s = o.tensor->shape;
  if (s.size() != 3) a.fail(fmt::format("'{}' must be [E,Out,In]", o.tensor->name));
  if ((d.E != 0 && s[0] != d.E) || (d.Out != 0 && s[1] != d.Out) || (d.In != 0 && s[2] != d.In))
    a.fail(fmt::format("'{}' is [{},{},{}], not [E,Out,In] = [{},{},{}]", o.tensor->name, s[0],
                       s[1], s[2], d.E, d.Out, d.In));
  d.E = s[0];
  d.Out = s[1];
  d.In = s[2];
}

}  // namespace

MoeDims moe_dims(const Operands& a) {
  MoeDims d;
  switch (a.op.kind) {
    case OpKind::router_topk:
    case OpKind::router_topk_bwd: {
      const bool fwd = a.op.kind == OpKind::router_topk;
      const Operand& probs = fwd ? output(a, "router_probs") : input(a, "router_probs");
      const Operand& index = fwd ? output(a, "index") : input(a, "index");
      d.M = rows(probs);
      d.E = last_dim(probs);
      d.K = last_dim(index);
      expect_matrix(a, fwd ? input(a, "logits") : output(a, "dlogits"), d.M, d.E, "[M,E]");
      expect_matrix(a, index, d.M, d.K, "[M,K]");
      expect_matrix(a, fwd ? output(a, "scores") : input(a, "dscores"), d.M, d.K, "[M,K]");
      a.require(d.K >= 1 && d.K <= d.E, "K must be in [1, E]");
      break;
    }
    case OpKind::moe_dispatch: {
      const Operand& x = input(a, "x");
      const Operand& index = input(a, "index");
      d.M = rows(x);
      d.H = last_dim(x);
      d.K = last_dim(index);
      d.E = output(a, "offsets").tensor->elements();
      expect_matrix(a, index, d.M, d.K, "[M,K]");
      expect_matrix(a, output(a, "xs"), d.pairs(), d.H, "[M*K,H]");
      a.require(output(a, "order").tensor->elements() == d.pairs(), "order must be [M*K]");
      break;
    }
    case OpKind::moe_dispatch_bwd: {
      const Operand& dx = output(a, "dx");
      d.M = rows(dx);
      d.H = last_dim(dx);
      const std::int64_t pairs = input(a, "order").tensor->elements();
      a.require(d.M > 0 && pairs % d.M == 0, "order must be [M*K]");
      d.K = pairs / d.M;
      expect_matrix(a, input(a, "dxs"), pairs, d.H, "[M*K,H]");
      break;
    }
    case OpKind::moe_combine:
    case OpKind::moe_combine_bwd: {
      const bool fwd = a.op.kind == OpKind::moe_combine;
      const Operand& scores = input(a, "scores");
      d.M = rows(scores);
      d.K = last_dim(scores);
      const Operand& y = fwd ? output(a, "y") : input(a, "dy");
      d.H = last_dim(y);
      expect_matrix(a, y, d.M, d.H, "[M,H]");
      expect_matrix(a, input(a, "ys"), d.pairs(), d.H, "[M*K,H]");
      a.require(input(a, "order").tensor->elements() == d.pairs(), "order must be [M*K]");
      if (!fwd) {
        expect_matrix(a, output(a, "dys"), d.pairs(), d.H, "[M*K,H]");
        expect_matrix(a, output(a, "dscores"), d.M, d.K, "[M,K]");
      }
      break;
    }
    case OpKind::grouped_linear_fwd:
    case OpKind::grouped_linear_bwd: {
      const bool fwd = a.op.kind == OpKind::grouped_linear_fwd;
      expect_stack(a, input(a, "w"), d);
      const Operand& offsets = input(a, "offsets");
      a.require(offsets.tensor->elements() == d.E, "offsets must be [E]");
      const Operand& rows_in = fwd ? input(a, "x") : output(a, "dx");
      d.M = rows(rows_in);  // the pairs: a grouped linear sees rows, not tokens
      d.K = 1;
      expect_matrix(a, rows_in, d.M, d.In, "[M*K,In]");
      expect_matrix(a, fwd ? output(a, "y") : input(a, "dy"), d.M, d.Out, "[M*K,Out]");
      if (!fwd) {
        const Operand* x = a.input("x");
        const Operand* dw = a.output("dw");
        a.require((x == nullptr) == (dw == nullptr), "x and dw come together");
        if (x != nullptr) {
          expect_matrix(a, *x, d.M, d.In, "[M*K,In]");
          expect_stack(a, *dw, d);
        }
      }
      break;
    }
    case OpKind::expert_lora_fwd:
    case OpKind::expert_lora_bwd: {
      const bool fwd = a.op.kind == OpKind::expert_lora_fwd;
      expect_stack(a, fwd ? input(a, "w") : input(a, "dw_eff"), d);
      if (fwd) expect_stack(a, output(a, "w_eff"), d);
      const Operand& A = input(a, "a");
      a.require(rows(A) % d.E == 0, "a must be [E*R,In]");
      d.R = rows(A) / d.E;
      expect_matrix(a, A, d.E * d.R, d.In, "[E*R,In]");
      expect_matrix(a, input(a, "b"), d.Out, d.E * d.R, "[Out,E*R]");
      if (!fwd) {
        expect_matrix(a, output(a, "da"), d.E * d.R, d.In, "[E*R,In]");
        expect_matrix(a, output(a, "db"), d.Out, d.E * d.R, "[Out,E*R]");
      }
      d.M = d.Out;  // each expert's product b_e a_e: Out rows
      d.K = 1;
      break;
    }
    case OpKind::router_aux_stats:
    case OpKind::router_aux_loss:
    case OpKind::router_aux_bwd: {
      const Operand& stats =
          a.op.kind == OpKind::router_aux_stats ? output(a, "stats") : input(a, "stats");
      a.require(stats.tensor->shape.size() == 2 && stats.tensor->shape[0] == 2 &&
                    stats.tensor->shape[1] >= 2,
                "stats must be [2,E+1]");
      d.E = stats.tensor->shape[1] - 1;
      d.M = d.K = 1;
      if (a.op.kind == OpKind::router_aux_loss) break;
      const Operand& probs =
          a.op.kind == OpKind::router_aux_stats ? output(a, "aux_probs") : input(a, "aux_probs");
      d.M = rows(probs);
      expect_matrix(a, probs, d.M, d.E, "[M,E]");
      if (a.op.kind == OpKind::router_aux_bwd) {
        expect_matrix(a, output(a, "dlogits"), d.M, d.E, "[M,E]");
        break;
      }
      expect_matrix(a, input(a, "logits"), d.M, d.E, "[M,E]");
      const Operand& index = input(a, "index");
      d.K = last_dim(index);
      expect_matrix(a, index, d.M, d.K, "[M,K]");
      if (const Operand* in = a.input("stats_in"))
        a.require(in->tensor->shape == stats.tensor->shape, "stats_in must be stats' shape");
      break;
    }
    default:
      a.fail("not a mixture-of-experts op");
  }
  a.require(d.M > 0 && d.K > 0, "no rows");
  return d;
}

LogprobOperands logprob_operands(const Operands& a) {
  const bool fwd = a.op.kind == OpKind::logprob_fwd;
  LogprobOperands d;
  d.x = &input(a, fwd ? "x" : "xs");
  const Operand& w = input(a, "w");
  const Shape& xs = d.x->tensor->shape;
  const Shape& full = fwd ? xs : output(a, "dx").tensor->shape;
  if (xs.size() != 3 || full.size() != 3)
    a.fail(fmt::format("'{}' must be [R,S,H]", d.x->tensor->name));
  d.R = full[0];
  d.S = full[1];
  d.H = full[2];
  d.P = xs[1];
  d.V = rows(w);
  expect_matrix(a, w, 0, d.H, "[V,H]");
  a.require(d.S >= 2, "each sequence needs 2 positions or more: the last has no next token");
  a.require(xs[0] == d.R && xs[2] == d.H && (d.P == d.S || (!fwd && d.P == d.S - 1)),
            "xs must be [R,S-1,H] or x itself [R,S,H]");
  a.require(input(a, "targets").tensor->elements() == d.tokens(), "targets must be [R,S]");
  for (std::string_view name : {"logp", "logz"}) {
    const Operand& o = fwd ? output(a, name) : input(a, name == "logp" ? "dlogp" : name);
    a.require(o.tensor->elements() == d.tokens(), "logp, dlogp and logz must be [R,S]");
  }
  if (fwd) {
    d.xs = a.output("xs");
    if (d.xs != nullptr)
      a.require(d.xs->tensor->shape == Shape{d.R, d.S - 1, d.H}, "xs must be [R,S-1,H]");
  } else if (const Operand* dw = a.output("dw")) {
    a.require(dw->tensor->shape == w.tensor->shape, "dw must be w's shape");
  }
  a.require(!a.held.empty() && a.held[0].data != nullptr && a.held[0].tensor->shape.size() == 2,
            "the logits' tile [T,C] must be its first held tensor");
  d.tile = &a.held[0];
  d.T = d.tile->tensor->shape[0];
  d.C = d.tile->tensor->shape[1];
  a.require(d.T >= 1 && d.C >= 1 && d.C <= d.V, "the tile must be [T,C] with 1 <= C <= V");
  const DType tile_dtype = d.tile->tensor->dtype;
  a.require(is_floating(tile_dtype), "the tile must be of a floating dtype");
  if (tile_dtype != d.x->tensor->dtype) {
    const bool rows_held =
        a.held.size() >= 3 && a.held[1].data != nullptr && a.held[2].data != nullptr &&
        a.held[1].tensor->dtype == tile_dtype && a.held[2].tensor->dtype == tile_dtype &&
        a.held[1].tensor->shape == Shape{d.T, d.H} && a.held[2].tensor->shape == Shape{d.C, d.H};
    a.require(rows_held,
              "a tile of another dtype than x needs its x rows [T,H] and w rows [C,H] in that "
              "dtype as the second and third held tensors");
    d.x_rows = &a.held[1];
    d.w_rows = &a.held[2];
  }
  return d;
}

const Operand* lora_columns(const Operands& a, const LoraDims& d) {
  const bool fwd = a.op.kind == OpKind::lora_fwd;
  const DType dt = a.dtype();
  const Tensor& y = *input(a, fwd ? "y" : "dy").tensor;
  if (y.dtype == dt) return nullptr;
  Shape columns = y.shape;
  columns.back() = d.N;
  if (const Operand* h = a.held_like(dt, columns)) return h;
  a.fail(
      fmt::format("{} is of another dtype than its adapters ({}), and it holds no tensor of "
                  "{} columns in theirs to keep the adapter's columns in",
                  fwd ? "y" : "dy", dtype_name(dt), d.N));
}

DequantizeOperands dequantize_operands(const Operands& a) {
  const Op& op = a.op;
  const Operand& w = output(a, "w");
  a.require(w.tensor->shape.size() == 2, "w must be [Out,In]");
  a.require(op.row_offset + op.rows <= w.tensor->shape[0], "rows past the weight's");
  const bool nested = op.double_quant;
  a.require(a.in.size() == (nested ? 4u : 2u),
            nested ? "double quantisation reads codes, absmax, absmax2 and offset"
                   : "reads codes and absmax");
  DequantizeOperands d;
  d.cols = w.tensor->shape[1];
  d.in.data = a.u8(input(a, "codes"));
  const Operand& absmax = input(a, "absmax");  // 8-bit under double quantisation, else fp32
  if (nested) {
    d.in.qabsmax = a.u8(absmax);
    d.in.absmax2 = a.f32(input(a, "absmax2"));
    d.in.offset = a.f32(input(a, "offset"));
  } else {
    d.in.absmax = a.f32(absmax);
  }
  d.rows = static_cast<char*>(w.data) + op.row_offset * d.cols * dtype_size(w.tensor->dtype);
  return d;
}

kquant::AdamW8bitState adamw_8bit_state(const Operands& a) {
  const std::int64_t n = input(a, "w").tensor->elements();
  const Operand &m = input(a, "m"), &v = input(a, "v");
  const Operand &absmax_m = input(a, "m_absmax"), &absmax_v = input(a, "v_absmax");
  a.require(input(a, "grad").tensor->elements() == n, "grad and weight differ in size");
  a.require(m.tensor->dtype == DType::u8 && v.tensor->dtype == DType::u8 &&
                optimizer_state_is_8bit(n) && m.tensor->elements() == n &&
                v.tensor->elements() == n,
            "8-bit moments (u8) of the weight's elements, kMin8bitSize or more");
  const std::int64_t blocks = quant_blocks(n, kOptimizer8bitBlock);
  a.require(absmax_m.tensor->elements() == blocks && absmax_v.tensor->elements() == blocks &&
                absmax_m.tensor->dtype == DType::f32 && absmax_v.tensor->dtype == DType::f32,
            "an fp32 absmax per block of m and of v");
  kquant::AdamW8bitState state;
  state.m_codes = a.u8(m);
  state.v_codes = a.u8(v);
  state.absmax_m = a.f32(absmax_m);
  state.absmax_v = a.f32(absmax_v);
  return state;
}

OptimizerOperands optimizer_operands(const Operands& a) {
  a.require(a.op.kind == OpKind::adamw_step || a.op.kind == OpKind::sgd_step,
            "not an adamw_step or sgd_step");
  const bool adam = a.op.kind == OpKind::adamw_step;
  const Operand &w = input(a, "w"), &grad = input(a, "grad");
  const Operand& m = input(a, adam ? "m" : "momentum");
  const Operand* master = a.input("master");
  OptimizerOperands o;
  o.w = w.data;
  o.grad = grad.data;
  o.dtype = w.tensor->dtype;
  o.m = m.data;
  o.state_dtype = m.tensor->dtype;
  o.master = master ? a.f32(*master) : nullptr;
  o.elements = w.tensor->elements();
  a.require(grad.tensor->dtype == o.dtype, "grad and weight differ in dtype");
  auto same_size = [&](const Operand& x) {
    if (x.tensor->elements() != o.elements)
      a.fail(fmt::format("'{}' and the weight differ in size", x.tensor->name));
  };
  same_size(grad);
  same_size(m);
  if (master) same_size(*master);
  if (o.state_dtype != DType::f32 && o.state_dtype != o.dtype)
    a.fail(fmt::format("state '{}' is {}: fp32 or the weight's {}", m.tensor->name,
                       dtype_name(o.state_dtype), dtype_name(o.dtype)));
  if (adam) {
    const Operand& v = input(a, "v");
    same_size(v);
    a.require(v.tensor->dtype == o.state_dtype, "m and v differ in dtype");
    o.v = v.data;
  }
  return o;
}

kmath::AdamParams adam_params(const Op& op, int step) {
  kmath::AdamParams p;
  p.lr = op.lr;
  p.beta1 = op.beta1;
  p.beta2 = op.beta2;
  p.eps = op.adam_eps;
  p.weight_decay = op.weight_decay;
  p.step = step;
  p.grad_scale = op.grad_scale;
  return p;
}

kmath::SgdParams sgd_params(const Op& op) {
  kmath::SgdParams p;
  p.lr = op.lr;
  p.momentum = op.momentum;
  p.weight_decay = op.weight_decay;
  p.grad_scale = op.grad_scale;
  return p;
}

}  // namespace vrambench
