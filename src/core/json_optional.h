// What nlohmann/json needs to know about standard types it does not serialise itself: an empty
// std::optional is null, a full one its value.
#pragma once

#include <nlohmann/json.hpp>
#include <optional>

namespace nlohmann {

template <typename T>
struct adl_serializer<std::optional<T>> {
  static void to_json(json& j, const std::optional<T>& value) {
    if (value)
      j = *value;
    else
      j = nullptr;
  }
  static void from_json(const json& j, std::optional<T>& value) {
    if (j.is_null())
      value.reset();
    else
      value = j.get<T>();
  }
};

}  // namespace nlohmann
