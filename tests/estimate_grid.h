// A grid of configurations whose estimate is held against the step replayed on a sim device: the
// same max batch and the same peak, to the byte. The estimate tests of each recipe family (lean,
// fine-tuning, hf) build their grid and call expect_estimate_exact.
#pragma once

#include <fmt/format.h>
#include <gtest/gtest.h>

#include <string>
#include <string_view>
#include <vector>

#include "device/device.h"
#include "measure/measure.h"
#include "model/families.h"

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

// Measures every case: the estimate's max batch is the sim's and its peak at the batch compared
// is the sim's, to the byte (the estimate replays the same program through the same allocator);
// `full` (the whole grid, from an environment variable) also prints each case.
inline void expect_estimate_exact(const std::vector<Case>& cases, bool full) {
  ASSERT_FALSE(cases.empty());
  int exact = 0;
  for (const Case& c : cases) {
    validate(c.cfg);
    const Measurement m = measure(c.cfg, make_device(c.cfg), {});
    if (full)
      fmt::print("B={} est={} sim={} {}\n", m.compared_batch(), m.estimated_peak(),
                 m.measured_peak(), c.label);
    EXPECT_EQ(m.estimated_peak(), m.measured_peak()) << c.label;
    if (!m.search.hit_limit) {
      EXPECT_EQ(m.est_max_batch, m.search.max_batch) << c.label;
    }
    if (m.estimated_peak() == m.measured_peak()) ++exact;
  }
  fmt::print("{} of {} to the byte\n", exact, cases.size());
}

}  // namespace vrambench::testing_grid
