// The estimate of --framework lean's full training, every scope, under PyTorch's caching
// allocator against the step replayed on a sim device: the same max batch and peak, to the byte.
// VRAMBENCH_LEAN_FULL_GRID=1 walks the whole grid instead of the sample.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdlib>
#include <string>
#include <vector>

#include "estimate_grid.h"
#include "model/families.h"
#include "program/program.h"

namespace vrambench {
namespace {

using testing_grid::Case;

std::vector<Case> grid(bool full) {
  std::vector<Case> out;
  std::size_t index = 0;
  for (std::string_view preset : {"tiny", "tiny-llama", "gpt2", "gpt2-large", "llama3-8b"})
    for (std::int64_t seq : {512, 2048, 8192})
      for (Precision p : {Precision::fp32, Precision::bf16})
        for (Attention att : {Attention::eager, Attention::flash})
          for (Recompute rc : {Recompute::none, Recompute::selective, Recompute::full})
            for (double dropout : {0.0, 0.1})
              for (Optimizer opt : {Optimizer::none, Optimizer::adamw, Optimizer::adamw_8bit})
                for (Scope scope : {Scope::model, Scope::layer, Scope::mlp, Scope::attention}) {
                  // Every scope is small: one size of each is enough.
                  if (scope != Scope::model && (seq != 2048 || preset == "tiny")) continue;
                  if (!full && index++ % 29 != 0) continue;
                  RunConfig cfg = testing_grid::grid_config(preset, seq, p, att, rc, opt,
                                                            AllocatorKind::caching);
                  cfg.framework = Framework::lean;
                  cfg.dropout = dropout;
                  cfg.scope = scope;
                  out.push_back({cfg, fmt::format("{} S={} {} {} {} dropout {} {} {}", preset, seq,
                                                  to_string(p), to_string(att), to_string(rc),
                                                  dropout, to_string(opt), to_string(scope))});
                }
  // Accumulation keeps every gradient from the start of the step.
  for (Recompute rc : {Recompute::selective, Recompute::full}) {
    RunConfig cfg = out.front().cfg;
    cfg.model = find_preset("gpt2").model;
    cfg.scope = Scope::model;
    cfg.seq = 1024;
    cfg.recompute = rc;
    cfg.optimizer = Optimizer::adamw;
    cfg.grad_accum = 4;
    out.push_back({cfg, fmt::format("gpt2 S=1024 {} adamw accum 4", to_string(rc))});
  }
  return out;
}

TEST(EstimateLean, UnderTheCachingAllocatorEqualsTheSimToTheByte) {
  const bool full = std::getenv("VRAMBENCH_LEAN_FULL_GRID") != nullptr;
  testing_grid::expect_estimate_exact(grid(full), full);
}

}  // namespace
}  // namespace vrambench
