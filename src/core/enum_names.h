// The names of an enum's values: the one table per enum that the command line, the sweep and the
// tables read names from, and the parser of a name every folder's enums share.
#pragma once

#include <span>
#include <string>
#include <string_view>
#include <utility>

namespace vrambench {

// Every value of an enum with its name, in declaration order. The header that declares an enum
// declares its enum_names specialisation.
template <typename E>
using EnumNames = std::span<const std::pair<E, std::string_view>>;
template <typename E>
EnumNames<E> enum_names();
// Other spellings an enum accepts (not listed as its names): the Hugging Face `optim` names of
// the optimizers ("adamw_torch", "paged_adamw_8bit"). Empty for most enums.
template <typename E>
EnumNames<E> enum_aliases() {
  return {};
}

// Throws the UsageError of parse_enum: `text` is not a name --`option` takes; `allowed` lists them.
[[noreturn]] void throw_unknown_name(std::string_view text, std::string_view option,
                                     std::string_view allowed);

// The value named `text` (a name or an alias); throws UsageError naming --`option` and the
// allowed values.
template <typename E>
E parse_enum(std::string_view text, std::string_view option) {
  std::string allowed;
  for (const auto& [e, name] : enum_names<E>()) {
    if (name == text) return e;
    allowed += allowed.empty() ? "" : "|";
    allowed += name;
  }
  for (const auto& [e, name] : enum_aliases<E>())
    if (name == text) return e;
  throw_unknown_name(text, option, allowed);
}

// The name of `value` in `names`, "?" for a value the table lacks.
template <typename E>
std::string_view enum_name(EnumNames<E> names, E value) {
  for (const auto& [e, name] : names)
    if (e == value) return name;
  return "?";
}

}  // namespace vrambench
