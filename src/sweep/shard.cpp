#include "sweep/shard.h"

#include <fmt/format.h>

#include <charconv>

#include "core/error.h"

namespace vrambench {
namespace {

bool whole_number(std::string_view text, std::int64_t& n) {
  const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), n);
  return !text.empty() && ec == std::errc() && end == text.data() + text.size();
}

}  // namespace

Shard parse_shard(std::string_view text) {
  const std::size_t slash = text.find('/');
  Shard shard;
  if (slash == std::string_view::npos || !whole_number(text.substr(0, slash), shard.index) ||
      !whole_number(text.substr(slash + 1), shard.count) || shard.count < 1 || shard.index < 0 ||
      shard.index >= shard.count)
    throw UsageError(fmt::format(
        "invalid --shard '{}': use K/N with 0 <= K < N, e.g. --shard 0/4 (the first of four)",
        text));
  return shard;
}

std::int64_t shard_size(const Shard& shard, std::int64_t total) {
  return total > shard.index ? (total - shard.index + shard.count - 1) / shard.count : 0;
}

}  // namespace vrambench
