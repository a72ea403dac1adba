// The estimate of the fine-tuning recipes (full, lora, qlora; LoRA dropout too) against the step
// replayed through the allocator on a sim device: the same max batch and peak, to the byte.
// VRAMBENCH_FINETUNE_FULL_GRID=1 walks the whole grid instead of the sample.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "device/device.h"
#include "estimate_grid.h"
#include "measure/measure.h"
#include "model/families.h"

namespace vrambench {
namespace {

using testing_grid::Case;

std::vector<Case> grid(bool full, AllocatorKind allocator) {
  std::vector<Case> out;
  std::size_t index = 0;
  for (std::string_view preset : {"tiny", "tiny-llama", "gpt2", "llama2-7b"})
    for (Finetune ft : {Finetune::full, Finetune::lora, Finetune::qlora})
      for (QuantKind quant : {QuantKind::none, QuantKind::nf4, QuantKind::fp4, QuantKind::int8})
        for (Toggle dq : {Toggle::off, Toggle::on})
          for (Optimizer opt : {Optimizer::adamw, Optimizer::adamw_8bit, Optimizer::paged_adamw,
                                Optimizer::paged_adamw_8bit, Optimizer::sgd, Optimizer::none})
            for (std::int64_t rank : {8, 64})
              for (std::string_view targets : {"attn", "all-linear", "qv"})
                for (Recompute rc : {Recompute::none, Recompute::selective, Recompute::full})
                  for (Attention att : {Attention::eager, Attention::flash})
                    for (Precision p : {Precision::bf16, Precision::fp32})
                      for (double lora_dropout : {0.0, 0.05}) {
                        const bool ftune = ft != Finetune::full;
                        if (!ftune && lora_dropout > 0.0) continue;
                        if (!ftune && (quant != QuantKind::none || rank != 8 || targets != "attn"))
                          continue;
                        if (ft == Finetune::qlora && quant == QuantKind::int8) continue;
                        if (ft == Finetune::lora && quant == QuantKind::none && dq == Toggle::off)
                          continue;
                        if (!is_4bit(ft == Finetune::qlora && quant == QuantKind::none
                                         ? QuantKind::nf4
                                         : quant) &&
                            dq == Toggle::off)
                          continue;
                        const bool big = preset == "llama2-7b" || preset == "gpt2";
                        if (preset == "llama2-7b" &&
                            (p == Precision::fp32 || att == Attention::eager))
                          continue;
                        if (!full && (index++ % 97 != 0)) continue;
                        RunConfig cfg = testing_grid::grid_config(
                            preset, big ? (preset == "gpt2" ? 1024 : 2048) : 512, p, att, rc, opt,
                            allocator);
                        cfg.finetune = ft;
                        cfg.quant = quant;
                        cfg.double_quant = dq;
                        cfg.lora_rank = rank;
                        cfg.lora_dropout = lora_dropout;
                        const bool gpt = cfg.model.arch == Arch::gpt;
                        cfg.lora_targets = parse_lora_targets(
                            targets == "qv" ? (gpt ? "c_attn" : "q_proj,v_proj") : targets);
                        const std::string label =
                            std::string(preset) + " " + std::string(to_string(ft)) + " " +
                            std::string(to_string(quant)) + " dq " + std::string(to_string(dq)) +
                            " " + std::string(to_string(opt)) + " r" + std::to_string(rank) + " " +
                            std::string(targets) + " " + std::string(to_string(rc)) + " " +
                            std::string(to_string(att)) + " " + std::string(to_string(p)) +
                            " lora dropout " + std::to_string(lora_dropout);
                        out.push_back({cfg, label});
                      }
  return out;
}

TEST(EstimateFinetune, EqualsTheSimToTheByte) {
  const bool full = std::getenv("VRAMBENCH_FINETUNE_FULL_GRID") != nullptr;
  testing_grid::expect_estimate_exact(grid(full, AllocatorKind::direct), full);
}

// Under PyTorch's caching allocator the estimate adds what the allocator reserves beyond the
// tensors, from a replay of the step program's allocations (the adapters' small tensors, the
// dequantised weights and the 8-bit state carve up its segments).
TEST(EstimateFinetune, UnderTheCachingAllocatorEqualsTheSimToTheByte) {
  const bool full = std::getenv("VRAMBENCH_FINETUNE_FULL_GRID") != nullptr;
  testing_grid::expect_estimate_exact(grid(full, AllocatorKind::caching), full);
}

}  // namespace
}  // namespace vrambench
