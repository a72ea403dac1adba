// The JSON of what a search measures: the hand-written parts (roles by name, the configuration
// given back).
#include "measure/measurement_json.h"

#include <string>

namespace vrambench {

void to_json(nlohmann::json& j, const RoleBytes& r) {
  j = nlohmann::json::object();
  for (int i = 0; i < kRoleCount; ++i) {
    const auto role = static_cast<Role>(i);
    j[std::string(to_string(role))] = r[role];
  }
}

void from_json(const nlohmann::json& j, RoleBytes& r) {
  for (int i = 0; i < kRoleCount; ++i) {
    const auto role = static_cast<Role>(i);
    r[role] = j.at(std::string(to_string(role))).get<Bytes>();
  }
}

Measurement measurement_from_json(const nlohmann::json& j, const RunConfig& cfg) {
  Measurement m = j.get<Measurement>();
  m.config = cfg;
  return m;
}

}  // namespace vrambench
