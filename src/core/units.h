// Byte counts: parsing user sizes ("24GiB", "16GB", "20.5"), printing them for people, and checked
// arithmetic so that sizes derived from user input never silently overflow.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

namespace vrambench {

// A count of bytes. Signed so that differences (capacity - fixed) can go negative safely.
using Bytes = std::int64_t;

inline constexpr Bytes KiB = 1024;
inline constexpr Bytes MiB = 1024 * KiB;
inline constexpr Bytes GiB = 1024 * MiB;

// Parses a size: "24GiB", "24GB" (decimal, 24e9), "16384MiB", "512KiB", "1.5TiB", "100B", or a bare
// number meaning GiB ("24", "20.5"). Case-insensitive units. Throws UsageError naming `what`.
Bytes parse_bytes(std::string_view text, std::string_view what = "size");

// "812.0 KiB", "1.50 MiB", "23.99 GiB": binary units with three significant-ish digits for people.
std::string format_bytes(Bytes bytes);

// Throw UsageError("<what> overflows 64 bits (a x b)" or "(a + b)"): the cold half of the checks.
[[noreturn]] void throw_mul_overflow(Bytes a, Bytes b, std::string_view what);
[[noreturn]] void throw_add_overflow(Bytes a, Bytes b, std::string_view what);

// a * b and a + b, throwing UsageError("<what> overflows 64 bits ...") instead of wrapping. Inline:
// the program builders and the estimate call them for every size they derive.
inline Bytes checked_mul(Bytes a, Bytes b, std::string_view what) {
  Bytes out = 0;
  if (__builtin_mul_overflow(a, b, &out)) [[unlikely]]
    throw_mul_overflow(a, b, what);
  return out;
}
inline Bytes checked_add(Bytes a, Bytes b, std::string_view what) {
  Bytes out = 0;
  if (__builtin_add_overflow(a, b, &out)) [[unlikely]]
    throw_add_overflow(a, b, what);
  return out;
}

// Rounds `value` up to a multiple of `granule` (granule > 0).
constexpr Bytes round_up(Bytes value, Bytes granule) {
  return (value + granule - 1) / granule * granule;
}

// The segment the `direct` allocator (raw cudaMalloc) takes for a request of `bytes`: a request
// above 1 MiB is backed by 2 MiB large pages, so it occupies a whole number of them; a smaller one
// is carved from a shared page at the 512 B alignment PyTorch also uses (kMinBlockSize). The real
// driver's sub-allocation of small requests is undocumented; 512 B makes direct and caching agree
// on what a small tensor costs by itself. Here because the estimate counts it too.
constexpr Bytes direct_segment_bytes(Bytes bytes) {
  constexpr Bytes kLargePageThreshold = Bytes{1} << 20, kLargePage = Bytes{2} << 20;
  return bytes > kLargePageThreshold ? round_up(bytes, kLargePage) : round_up(bytes, 512);
}

}  // namespace vrambench
