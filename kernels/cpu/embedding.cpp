// Embedding lookup and backward. The backward sums in double so that rows hit by many positions do
// not lose low bits. Then the adapters of embedding_fwd and embedding_bwd (cpu/op_table.h).
#include "cpu/embedding.h"

#include <string>
#include <vector>

#include "core/error.h"
#include "cpu/op_table.h"

namespace vrambench::cpu {
namespace {
std::int64_t checked_token(std::int32_t token, std::int64_t V) {
  if (token < 0 || token >= V)
    throw InternalError("embedding: token " + std::to_string(token) + " outside [0, " +
                        std::to_string(V) + ")");
  return token;
}
}  // namespace

void embedding_fwd(float* x, const std::int32_t* tokens, const float* wte, const float* wpe,
                   std::int64_t B, std::int64_t S, std::int64_t V, std::int64_t H) {
  for (std::int64_t b = 0; b < B; ++b)
    for (std::int64_t s = 0; s < S; ++s) {
      const std::int64_t row = checked_token(tokens[b * S + s], V);
      float* out = x + (b * S + s) * H;
      for (std::int64_t h = 0; h < H; ++h)
        out[h] = wte[row * H + h] + (wpe ? wpe[s * H + h] : 0.0f);
    }
}

void embedding_bwd(float* dwte, float* dwpe, const float* dx, const std::int32_t* tokens,
                   std::int64_t B, std::int64_t S, std::int64_t V, std::int64_t P, std::int64_t H) {
  std::vector<double> acc_wte(static_cast<std::size_t>(V * H), 0.0);
  std::vector<double> acc_wpe(dwpe ? static_cast<std::size_t>(P * H) : 0u, 0.0);
  for (std::int64_t b = 0; b < B; ++b)
    for (std::int64_t s = 0; s < S; ++s) {
      const std::int64_t row = checked_token(tokens[b * S + s], V);
      const float* g = dx + (b * S + s) * H;
      for (std::int64_t h = 0; h < H; ++h) {
        acc_wte[static_cast<std::size_t>(row * H + h)] += g[h];
        if (dwpe) acc_wpe[static_cast<std::size_t>(s * H + h)] += g[h];
      }
    }
  for (std::size_t i = 0; i < acc_wte.size(); ++i) dwte[i] = static_cast<float>(acc_wte[i]);
  for (std::size_t i = 0; i < acc_wpe.size(); ++i) dwpe[i] = static_cast<float>(acc_wpe[i]);
}

}  // namespace vrambench::cpu

namespace vrambench {

void cpu_run_embedding_fwd(const Operands& a, CpuContext&) {
  const EmbeddingDims d = embedding_dims(a);
  const auto ids = cpu::load_ids(a, a.in[0]);
  const auto w = cpu::load(a.in[1]);
  std::vector<float> wpe;
  if (const Operand* positions = a.input("wpe")) {
    a.require(d.P >= d.S, "wpe has fewer rows than positions");
    wpe = cpu::load(*positions);
  }
  auto x = cpu::zeros_like(a.out[0]);
  a.require(static_cast<std::int64_t>(x.size()) == d.B * d.S * d.H, "x must be [B,S,H]");
  cpu::embedding_fwd(x.data(), ids.data(), w.data(), wpe.empty() ? nullptr : wpe.data(), d.B, d.S,
                     d.V, d.H);
  if (a.op.embed_scale != 1.0f)
    for (float& v : x) v *= a.op.embed_scale;
  cpu::store_out(a, 0, x);
}

void cpu_run_embedding_bwd(const Operands& a, CpuContext&) {
  const EmbeddingDims d = embedding_dims(a);
  const Operand* dwpe = a.output("dwpe");
  auto dx = cpu::load(a.in[0]);
  if (a.op.embed_scale != 1.0f)
    for (float& v : dx) v *= a.op.embed_scale;
  const auto ids = cpu::load_ids(a, a.in[1]);
  auto g_wte = cpu::zeros_like(a.out[0]);
  std::vector<float> g_wpe;
  if (dwpe) {
    g_wpe = cpu::zeros_like(*dwpe);
    a.require(d.P >= d.S, "dwpe has fewer rows than positions");
  }
  cpu::embedding_bwd(g_wte.data(), g_wpe.empty() ? nullptr : g_wpe.data(), dx.data(), ids.data(),
                     d.B, d.S, d.V, d.P, d.H);
  cpu::store_out(a, 0, g_wte);
  // Only the token table is ever tied (to the lm head, whose backward wrote its gradient first);
  // the position table's gradient has no earlier writer, so `accumulate` never applies to it.
  if (dwpe) cpu::store(*dwpe, g_wpe, false);
}

}  // namespace vrambench
