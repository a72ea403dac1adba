// The names of the architectures.
#include "model/model_config.h"

#include <array>
#include <utility>

namespace vrambench {
namespace {

constexpr std::array<std::pair<Arch, std::string_view>, 2> kArch{
    {{Arch::gpt, "gpt"}, {Arch::llama, "llama"}}};

}  // namespace

std::string_view to_string(Arch v) {
  return enum_name<Arch>(kArch, v);
}

template <>
EnumNames<Arch> enum_names<Arch>() {
  return kArch;
}

}  // namespace vrambench
