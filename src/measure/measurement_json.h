// Trials, searches and measurements as JSON: the pipe from a measuring child to its parent, and the
// per-row details of the result files. Byte counts are raw integers.
#pragma once

#include <nlohmann/json.hpp>
#include <optional>

#include "core/json_optional.h"
#include "estimate/breakdown_json.h"
#include "measure/measure.h"
#include "measure/trial.h"
#include "search/search.h"

namespace vrambench {

// {"weight": bytes, "grad": bytes, ...}, every role present.
void to_json(nlohmann::json& j, const RoleBytes& r);
void from_json(const nlohmann::json& j, RoleBytes& r);

NLOHMANN_DEFINE_TYPE_NON_INTRUSIVE(OomInfo, op, tensor, requested, free)
NLOHMANN_DEFINE_TYPE_NON_INTRUSIVE(TrialResult, fit, oom, tensor_peak, reserved_peak, device_peak,
                                   driver_peak, peak_op, peak_by_role, paged_bytes)
NLOHMANN_DEFINE_TYPE_NON_INTRUSIVE(Probe, batch, fits)
NLOHMANN_DEFINE_TYPE_NON_INTRUSIVE(SearchResult, max_batch, hit_limit, trials, non_monotone)
NLOHMANN_DEFINE_TYPE_NON_INTRUSIVE(FormulaFigures, max_batch, peak)
// Everything but the configuration, which whoever reads it back already has
// (measurement_from_json).
NLOHMANN_DEFINE_TYPE_NON_INTRUSIVE(Measurement, estimate, est_max_batch, search, trials,
                                   next_needed, failure, reason, attention_impl, fixed_overhead,
                                   est_peak_at_compared, formula)

// A Measurement of `cfg` from its JSON.
Measurement measurement_from_json(const nlohmann::json& j, const RunConfig& cfg);

}  // namespace vrambench
