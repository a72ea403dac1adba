// Sharding a sweep: --shard K/N runs every N-th configuration of the expansion starting at K, so
// that N processes (one per GPU, or Slurm array tasks) split a grid and `vrambench merge` joins
// their tables back in the grid's order.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string_view>
#include <vector>

namespace vrambench {

struct Shard {
  std::int64_t index = 0;  // K, from 0
  std::int64_t count = 1;  // N
  bool operator==(const Shard&) const = default;
};

// "K/N" with 0 <= K < N. Throws UsageError naming the text and the form.
Shard parse_shard(std::string_view text);

// Whether configuration `i` of the expansion belongs to `shard`.
inline bool in_shard(const Shard& shard, std::size_t i) {
  return static_cast<std::int64_t>(i % static_cast<std::size_t>(shard.count)) == shard.index;
}

// How many of `total` configurations `shard` runs.
std::int64_t shard_size(const Shard& shard, std::int64_t total);

// The position in the whole expansion of row `row` of shard `shard`.
inline std::int64_t grid_index(const Shard& shard, std::int64_t row) {
  return shard.index + row * shard.count;
}

}  // namespace vrambench
