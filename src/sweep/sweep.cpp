// The --sweep grammar (doubling, step, factor, list and nvbench ranges) and the Cartesian expansion
// of axes into run configurations.
#include "sweep/sweep.h"

#include <fmt/format.h>

#include <algorithm>
#include <charconv>
#include <cstdint>
#include <optional>

#include "config/fields.h"
#include "core/error.h"

namespace vrambench {
namespace {

// Large enough for any sensible sweep, small enough that a typo ("1..1000000000:+1") fails at once
// instead of filling memory.
constexpr std::int64_t kMaxAxisValues = 100'000;
constexpr std::int64_t kMaxGridPoints = 1'000'000;

std::string_view trim(std::string_view s) {
  constexpr std::string_view kSpace = " \t\r\n";
  const auto first = s.find_first_not_of(kSpace);
  if (first == std::string_view::npos) return {};
  const auto last = s.find_last_not_of(kSpace);
  return s.substr(first, last - first + 1);
}

std::vector<std::string_view> split(std::string_view s, char sep) {
  std::vector<std::string_view> parts;
  for (;;) {
    const auto at = s.find(sep);
    parts.push_back(trim(s.substr(0, at)));
    if (at == std::string_view::npos) return parts;
    s.remove_prefix(at + 1);
  }
}

// A valid form for the field, shown in every error so that the fix is one copy away.
std::string example_for(const FieldInfo* field) {
  if (field == nullptr) return "seq=512..8192";
  const std::string name(field->name);
  switch (field->kind) {
    case FieldKind::integer:
      return name + "=512..8192";
    case FieldKind::real:
      return name + "=0,0.1";
    case FieldKind::number:
      return name + "=16,32";
    case FieldKind::size:
      return name + "=24GiB,80GiB";
    case FieldKind::choice: {
      // The help of a choice field starts with its allowed values, "a|b|c".
      std::string values(field->help.substr(0, field->help.find_first_of(" :")));
      std::replace(values.begin(), values.end(), '|', ',');
      return name + "=" + values;
    }
    case FieldKind::text:
      break;
  }
  if (name == "preset") return "preset=gpt2,llama2-7b";
  if (name == "model") return "model=qwen/config.json,llama/config.json";
  if (name == "device") return "device=cpu,sim:h100-80gb";
  if (name == "lora-targets") return "lora-targets=attn,q_proj+v_proj,all-linear";
  return name + "=a,b";
}

// Builds the one-line error for an axis: what was given, what is wrong, and a valid form.
struct AxisError {
  std::string_view text;
  const FieldInfo* field = nullptr;

  UsageError operator()(std::string_view problem) const {
    return UsageError(
        fmt::format("invalid --sweep '{}': {} (example: {})", text, problem, example_for(field)));
  }
};

// A range bound or step: a whole number >= `minimum`, or nothing.
std::optional<std::int64_t> parse_whole(std::string_view s, std::int64_t minimum) {
  std::int64_t value = 0;
  const auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), value);
  if (s.empty() || ec != std::errc() || end != s.data() + s.size() || value < minimum)
    return std::nullopt;
  return value;
}

std::int64_t bound(std::string_view s, std::string_view what, const AxisError& fail) {
  if (s.empty()) throw fail(fmt::format("range {} is empty", what));
  if (auto v = parse_whole(s, 1)) return *v;
  throw fail(fmt::format("range {} '{}' is not a positive whole number", what, s));
}

void check_order(std::int64_t start, std::int64_t end, const AxisError& fail) {
  if (end < start) throw fail(fmt::format("range end {} is below start {}", end, start));
}

std::vector<std::int64_t> additive_range(std::int64_t start, std::int64_t end, std::int64_t step,
                                         const AxisError& fail) {
  check_order(start, end, fail);
  const std::int64_t count = (end - start) / step + 1;
  if (count > kMaxAxisValues)
    throw fail(
        fmt::format("range gives {} values, more than the {} allowed", count, kMaxAxisValues));
  std::vector<std::int64_t> values;
  values.reserve(static_cast<std::size_t>(count));
  for (std::int64_t i = 0; i < count; ++i) values.push_back(start + i * step);
  return values;
}

// start, start*factor, ... up to end; end itself only when the sequence lands on it. At most 63
// values since start >= 1 and factor >= 2.
std::vector<std::int64_t> geometric_range(std::int64_t start, std::int64_t end, std::int64_t factor,
                                          const AxisError& fail) {
  check_order(start, end, fail);
  std::vector<std::int64_t> values;
  for (std::int64_t v = start;;) {
    values.push_back(v);
    if (v > end / factor) return values;  // v * factor would pass end (or overflow)
    v *= factor;
  }
}

// "512..8192", "512..4096:+512", "256..8192:*4".
std::vector<std::int64_t> dotted_range(std::string_view spec, const AxisError& fail) {
  const auto dots = spec.find("..");
  const std::int64_t start = bound(trim(spec.substr(0, dots)), "start", fail);
  const std::string_view rest = spec.substr(dots + 2);
  const auto colon = rest.find(':');
  const std::string_view step = colon == std::string_view::npos ? "" : trim(rest.substr(colon + 1));
  const std::int64_t end = bound(trim(rest.substr(0, colon)), "end", fail);
  if (colon == std::string_view::npos) return geometric_range(start, end, 2, fail);
  if (step.empty()) throw fail("empty step after ':'; write :+N or :*N");
  const char op = step.front();
  if (op != '+' && op != '*')
    throw fail(fmt::format("step '{}' must be +N (add) or *N (multiply)", step));
  const std::string_view amount = trim(step.substr(1));
  const auto n = parse_whole(amount, 0);
  if (!n) throw fail(fmt::format("step '{}' is not a whole number", step));
  if (op == '+') {
    if (*n == 0) throw fail("step +0 never advances; use +1 or more");
    return additive_range(start, end, *n, fail);
  }
  if (*n < 2) throw fail(fmt::format("factor *{} never advances; use *2 or more", *n));
  return geometric_range(start, end, *n, fail);
}

// nvbench's "[start:end:step]" (inclusive; step 1 when left out).
std::vector<std::int64_t> bracket_range(std::string_view inner, std::int64_t minimum,
                                        const AxisError& fail) {
  const std::vector<std::string_view> parts = split(inner, ':');
  if (parts.size() < 2 || parts.size() > 3)
    throw fail(fmt::format("'[{}]' must be [start:end] or [start:end:step]", inner));
  auto number = [&](std::string_view s, std::string_view what) {
    if (auto v = parse_whole(s, minimum)) return *v;
    throw fail(fmt::format("range {} '{}' is not a whole number >= {}", what, s, minimum));
  };
  const std::int64_t start = number(parts[0], "start");
  const std::int64_t end = number(parts[1], "end");
  std::int64_t step = 1;
  if (parts.size() == 3) {
    const auto n = parse_whole(parts[2], 0);
    if (!n) throw fail(fmt::format("range step '{}' is not a whole number", parts[2]));
    if (*n == 0) throw fail("range step 0 never advances; use 1 or more");
    step = *n;
  }
  return additive_range(start, end, step, fail);
}

// "seq[pow2]=...": the values are exponents of two, as in nvbench.
std::vector<std::int64_t> powers_of_two(std::string_view spec, const AxisError& fail) {
  const bool bracketed = spec.starts_with('[');
  const std::string_view inner = bracketed ? trim(spec.substr(1, spec.size() - 2)) : spec;
  std::vector<std::int64_t> exponents;
  if (bracketed && inner.find(':') != std::string_view::npos) {
    exponents = bracket_range(inner, 0, fail);
  } else {
    for (std::string_view token : split(inner, ',')) {
      if (token.empty()) throw fail("empty exponent in the list");
      const auto e = parse_whole(token, 0);
      if (!e) throw fail(fmt::format("exponent '{}' is not a whole number", token));
      exponents.push_back(*e);
    }
  }
  std::vector<std::int64_t> values;
  for (const std::int64_t e : exponents) {
    if (e > 62) throw fail(fmt::format("2^{} overflows 64 bits; exponents go up to 62", e));
    values.push_back(std::int64_t{1} << e);
  }
  return values;
}

}  // namespace

Axis parse_axis(std::string_view text) {
  AxisError fail{trim(text)};
  const std::string_view whole = fail.text;
  const auto eq = whole.find('=');
  if (eq == std::string_view::npos) throw fail("expected FIELD=VALUES");

  std::string_view name = trim(whole.substr(0, eq));
  bool pow2 = false;
  if (const auto bracket = name.find('['); bracket != std::string_view::npos) {
    if (trim(name.substr(bracket)) != "[pow2]")
      throw fail(fmt::format("'{}' is not a field; the only modifier is [pow2]", name));
    pow2 = true;
    name = trim(name.substr(0, bracket));
  }
  if (name.empty()) throw fail("no field before '='");
  try {
    fail.field = &find_field(name);
  } catch (const UsageError& e) {
    throw fail(e.what());
  }
  const FieldInfo& field = *fail.field;

  const std::string_view spec = trim(whole.substr(eq + 1));
  if (spec.empty()) throw fail("no values after '='");
  const bool bracketed = spec.starts_with('[') || spec.ends_with(']');
  if (bracketed && !(spec.starts_with('[') && spec.ends_with(']')))
    throw fail(fmt::format("unbalanced brackets in '{}'", spec));
  const bool is_range = pow2 || spec.find("..") != std::string_view::npos ||
                        (bracketed && spec.find(':') != std::string_view::npos);

  Axis axis{std::string(field.name), {}};
  if (is_range) {
    if (field.kind != FieldKind::integer)
      throw fail(fmt::format("ranges need an integer field; give {} a list of values", field.name));
    std::vector<std::int64_t> numbers;
    if (pow2)
      numbers = powers_of_two(spec, fail);
    else if (bracketed)
      numbers = bracket_range(trim(spec.substr(1, spec.size() - 2)), 1, fail);
    else
      numbers = dotted_range(spec, fail);
    // Bounds and steps are whole numbers >= 1 (pow2: 2^0 and up): already what the field takes.
    axis.values.assign(numbers.begin(), numbers.end());
  } else {
    // A list; nvbench also writes it in brackets: "[512,1024]".
    const std::string_view list = bracketed ? trim(spec.substr(1, spec.size() - 2)) : spec;
    const std::vector<std::string_view> tokens = split(list, ',');
    if (std::ssize(tokens) > kMaxAxisValues)
      throw fail(fmt::format("list has {} values, more than the {} allowed", tokens.size(),
                             kMaxAxisValues));
    for (std::string_view token : tokens) {
      if (token.empty()) throw fail("empty value in the list");
      // Each value on its own; how fields fit together is validate()'s, once per grid point.
      try {
        axis.values.push_back(parse_field(field, token));
      } catch (const UsageError& e) {
        throw fail(e.what());
      }
    }
  }
  return axis;
}

std::vector<RunConfig> expand(const RunConfig& base, const std::vector<Axis>& axes) {
  std::vector<const FieldInfo*> fields_of_axes;
  std::vector<std::string_view> names;
  std::int64_t points = 1;
  bool too_many = false;
  for (const Axis& axis : axes) {
    fields_of_axes.push_back(&find_field(axis.field));
    const std::string_view name = fields_of_axes.back()->name;
    if (std::find(names.begin(), names.end(), name) != names.end())
      throw UsageError(fmt::format(
          "invalid --sweep: two axes on field '{}'; give it one axis with all its values "
          "(example: {})",
          name, example_for(fields_of_axes.back())));
    names.push_back(name);
    if (axis.values.empty())
      throw InternalError(fmt::format("sweep axis '{}' has no values", axis.field));
    too_many = too_many || __builtin_mul_overflow(points, std::ssize(axis.values), &points);
  }
  if (too_many || points > kMaxGridPoints) {
    const std::string size = too_many ? std::string("more than 2^63") : std::to_string(points);
    throw UsageError(fmt::format(
        "invalid --sweep: the grid has {} points, more than the {} allowed; narrow a range or "
        "use a larger step (example: seq=512..8192:*4)",
        size, kMaxGridPoints));
  }

  // The preset and model axes go first so that model-field axes (hidden=..., layers=...) override
  // them; iteration order stays the order the axes were given.
  std::vector<std::size_t> apply_order(axes.size());
  for (std::size_t i = 0; i < axes.size(); ++i) apply_order[i] = i;
  std::stable_partition(apply_order.begin(), apply_order.end(),
                        [&](std::size_t i) { return names[i] == "preset" || names[i] == "model"; });

  std::vector<RunConfig> configs;
  configs.reserve(static_cast<std::size_t>(points));
  std::vector<std::size_t> index(axes.size(), 0);  // an odometer; the last axis turns fastest
  for (std::int64_t point = 0; point < points; ++point) {
    RunConfig cfg = base;
    for (const std::size_t a : apply_order)
      set_field(cfg, *fields_of_axes[a], axes[a].values[index[a]]);
    configs.push_back(std::move(cfg));
    for (std::size_t a = axes.size(); a-- > 0;) {
      if (++index[a] < axes[a].values.size()) break;
      index[a] = 0;
    }
  }
  return configs;
}

std::vector<std::string> varying_fields(const std::vector<Axis>& axes) {
  std::vector<std::string> names;
  for (const Axis& axis : axes)
    if (axis.values.size() > 1) names.emplace_back(find_field(axis.field).name);
  return names;
}

}  // namespace vrambench
