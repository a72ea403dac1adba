// What the step program builders (build.cpp: lean, build_hf.cpp: hf) share: tensor naming of
// replays and the dropout seeds, so that both frameworks draw the same masks at the same sites.
#pragma once

#include <cstdint>
#include <string_view>

#include "core/config.h"
#include "core/units.h"

namespace vrambench::build_common {

// A replayed tensor's name adds it; a replayed tensor's gradient is named after the original.
inline constexpr std::string_view kRecomputeSuffix = ".recompute";

// Where a dropout sits; with the layer it gives the seed, so a replay regenerates the same mask.
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

// The step's sizes, as both builders name them (a builder derives from it): batch B, sequence S,
// hidden H, heads A, key/value heads K, head size D, q|k|v width Q, MLP width F, vocabulary V,
// and M = B * S tokens.
struct StepShape {
  explicit StepShape(const RunConfig& cfg)
      : B_(cfg.batch),
        S_(cfg.seq),
        H_(cfg.model.hidden),
        A_(cfg.model.heads),
        K_(cfg.model.kv_heads),
        D_(cfg.model.head_dim()),
        Q_(qkv_width(A_, K_, D_)),
        F_(cfg.model.ffn),
        V_(cfg.model.vocab),
        M_(checked_mul(B_, S_, "batch x seq")) {}

  std::int64_t B_, S_, H_, A_, K_, D_, Q_, F_, V_, M_;
};

// hf: whether attention saves the query as a view of the q|k|v projection (build_hf.cpp); the one
// place where the batch changes the hf program's structure, not only its sizes.
bool hf_query_is_a_view(const RunConfig& cfg, std::int64_t batch);

}  // namespace vrambench::build_common
