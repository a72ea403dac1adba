// The refusal of a name an enum does not have: formatted here, so that the header stays free of
// fmt for the CUDA sources that include it.
#include "core/enum_names.h"

#include <fmt/format.h>

#include "core/error.h"

namespace vrambench {

void throw_unknown_name(std::string_view text, std::string_view option, std::string_view allowed) {
  throw UsageError(fmt::format("invalid --{} '{}': allowed values are {}", option, text, allowed));
}

}  // namespace vrambench
