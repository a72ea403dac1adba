// Embedding lookup and backward. The backward sums in double so that rows hit by many positions do
// not lose low bits.
#include "cpu/embedding.h"

#include <string>
#include <vector>

#include "core/error.h"

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
