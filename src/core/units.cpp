// Size parsing and formatting.
#include "core/units.h"

#include <fmt/format.h>

#include <array>
#include <cctype>
#include <charconv>
#include <cmath>
#include <limits>

#include "core/error.h"

namespace vrambench {
namespace {

struct Unit {
  std::string_view suffix;
  double factor;
};

// Longest suffixes first so "GiB" wins over "B".
constexpr std::array<Unit, 11> kUnits{{{"kib", 1024.0},
                                       {"mib", 1024.0 * 1024},
                                       {"gib", 1024.0 * 1024 * 1024},
                                       {"tib", 1024.0 * 1024 * 1024 * 1024},
                                       {"kb", 1e3},
                                       {"mb", 1e6},
                                       {"gb", 1e9},
                                       {"tb", 1e12},
                                       {"k", 1024.0},
                                       {"b", 1.0},
                                       {"", 1024.0 * 1024 * 1024}}};

std::string lower(std::string_view s) {
  std::string out(s);
  for (char& c : out) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return out;
}

}  // namespace

Bytes parse_bytes(std::string_view text, std::string_view what) {
  auto fail = [&] {
    return UsageError(fmt::format(
        "invalid {} '{}': expected a size such as 24GiB, 24GB, 16384MiB or 24 (GiB)", what, text));
  };
  std::string s = lower(text);
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.back()))) s.pop_back();
  std::size_t start = 0;
  while (start < s.size() && std::isspace(static_cast<unsigned char>(s[start]))) ++start;
  s = s.substr(start);
  if (s.empty()) throw fail();
  for (const Unit& unit : kUnits) {
    if (s.size() < unit.suffix.size() ||
        s.compare(s.size() - unit.suffix.size(), unit.suffix.size(), unit.suffix) != 0)
      continue;
    std::string number = s.substr(0, s.size() - unit.suffix.size());
    while (!number.empty() && number.back() == ' ') number.pop_back();
    if (number.empty()) throw fail();
    double value = 0;
    auto [end, ec] = std::from_chars(number.data(), number.data() + number.size(), value);
    if (ec != std::errc() || end != number.data() + number.size() || !std::isfinite(value))
      throw fail();
    if (value <= 0)
      throw UsageError(fmt::format("invalid {} '{}': must be greater than zero", what, text));
    const double bytes = std::round(value * unit.factor);
    if (bytes >= 9.2e18)
      throw UsageError(fmt::format("invalid {} '{}': overflows 64 bits", what, text));
    if (bytes < 1) throw UsageError(fmt::format("invalid {} '{}': less than one byte", what, text));
    return static_cast<Bytes>(bytes);
  }
  throw fail();
}

std::string format_bytes(Bytes bytes) {
  const double b = static_cast<double>(bytes);
  const double mag = std::fabs(b);
  if (mag >= static_cast<double>(GiB))
    return fmt::format("{:.2f} GiB", b / static_cast<double>(GiB));
  if (mag >= static_cast<double>(MiB))
    return fmt::format("{:.1f} MiB", b / static_cast<double>(MiB));
  if (mag >= static_cast<double>(KiB))
    return fmt::format("{:.1f} KiB", b / static_cast<double>(KiB));
  return fmt::format("{} B", bytes);
}

void throw_mul_overflow(Bytes a, Bytes b, std::string_view what) {
  throw UsageError(fmt::format("{} overflows 64 bits ({} x {}); use smaller sizes", what, a, b));
}

void throw_add_overflow(Bytes a, Bytes b, std::string_view what) {
  throw UsageError(fmt::format("{} overflows 64 bits ({} + {}); use smaller sizes", what, a, b));
}

}  // namespace vrambench
