// What the step program builders (build.cpp: lean, build_hf.cpp: hf) share: tensor naming of
// replays and the dropout seeds, so that both frameworks draw the same masks at the same sites.
#pragma once

#include <cstdint>
#include <string_view>

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

}  // namespace vrambench::build_common
