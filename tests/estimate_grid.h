// A grid of configurations whose closed-form estimate is held against the step replayed on a sim
// device: within 1 % and never more than 0.5 % under at the sim's max batch. The estimate tests
// of each recipe family (fine-tuning, hf) build their grid and call expect_estimate_within.
#pragma once

#include <fmt/format.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <string>
#include <string_view>
#include <vector>

#include "core/presets.h"
#include "device/device.h"
#include "search/measure.h"

namespace vrambench::testing_grid {

struct Case {
  RunConfig cfg;
  std::string label;
};

// What every grid's configuration sets, on sim:h100-80gb; each grid adds its recipe's fields.
inline RunConfig grid_config(std::string_view preset, std::int64_t seq, Precision dtype,
                             Attention att, Recompute rc, Optimizer opt, AllocatorKind allocator) {
  RunConfig cfg;
  cfg.model = find_preset(preset).model;
  cfg.seq = seq;
  cfg.dtype = dtype;
  cfg.attention = att;
  cfg.recompute = rc;
  cfg.optimizer = opt;
  cfg.allocator = allocator;
  cfg.device = parse_device("sim:h100-80gb");
  return cfg;
}

// Measures every case; `full` (the whole grid, from an environment variable) also prints each
// error, for the distribution in docs/memory-model.md.
inline void expect_estimate_within(const std::vector<Case>& cases, bool full) {
  ASSERT_FALSE(cases.empty());
  double lo = 0.0, hi = 0.0;
  int within = 0;
  for (const Case& c : cases) {
    validate(c.cfg);
    const Measurement m = measure(c.cfg, make_device(c.cfg), {});
    const double err = m.relative_error();
    lo = std::min(lo, err);
    hi = std::max(hi, err);
    if (full) fmt::print("ERR {:+.5f} {} B={}\n", err, c.label, m.compared_batch());
    EXPECT_GT(err, -0.005) << c.label;
    EXPECT_LT(err, 0.01) << c.label;
    if (err > -0.005 && err < 0.01) ++within;
  }
  fmt::print("{} of {} within bounds, error from {:+.4f} to {:+.4f}\n", within, cases.size(), lo,
             hi);
}

}  // namespace vrambench::testing_grid
