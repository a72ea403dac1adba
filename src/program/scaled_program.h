// The step program of one configuration at any batch, for the estimate (which reads every tensor's
// bytes as a line in the batch) and for replays that run no executor (the sim device, and the
// replays that tell what a batch needs): a search replays one configuration at several batches,
// and building the program dominates a sim trial, so later batches rewrite the sizes that depend
// on the batch instead of building it again. The builders say which dimensions hold the batch
// (Program::batch_dims), so one build gives every size's line.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <vector>

#include "config/run_config.h"
#include "core/units.h"
#include "program/program.h"
#include "program/schedule.h"

namespace vrambench {

class BatchScaledProgram {
 public:
  // What makes the program of a configuration: build_program, or in tests a builder whose marks
  // are not lines, to reach the path that builds every batch.
  using Builder = std::function<Program(const RunConfig&, Bytes gemm_workspace)>;

  BatchScaledProgram(const RunConfig& cfg, Bytes gemm_workspace, Builder builder = build_program);

  // The program build_program gives at `batch` (cfg at that batch, which validate() accepts):
  // every tensor's bytes and shape, every op with its attributes, the config. The first batch is
  // built; its batch dimensions give each of them a line in the batch (B, B*S, the flash scratch:
  // size = intercept + per_sample * batch) and each tensor's bytes one too, when no tensor has
  // more than one such dimension and its loss scale is step_loss_scale's. Later batches are read
  // off the lines, and the loss scale is worked out again; without lines every batch is built.
  // Throws what build_program throws at `batch`. The reference is valid until the next call.
  // A batch whose program has another structure (structure_key: hf's gpt2 eager attention at
  // batch 1) is built on its own, leaving the lines of the others as they are.
  const Program& at(std::int64_t batch);
  // Of the program `at` returned last.
  const Liveness& liveness() const { return last_apart_ ? apart_liveness_ : liveness_; }
  // The training run of `steps` steps of the program `at` returned last: made once per structure
  // and number of steps.
  const Schedule& schedule(int steps = kTrialSteps);

  int builds() const { return builds_; }  // programs built so far (the rest were scaled)
  const RunConfig& config() const { return cfg_; }

  // One tensor size on a line in the batch: intercept + slope * batch.
  struct Line {
    Bytes intercept = 0;
    Bytes slope = 0;
  };
  // Each tensor's bytes as a line in the batch, for the structure of batch 2 and up: known once a
  // batch of that structure was asked for, when the program's marks give lines; else empty.
  const std::vector<Line>& byte_lines() const { return bytes_; }

 private:
  // A dimension that holds the batch: shape[dim] of tensor `tensor`.
  struct DimLine {
    int tensor = 0;
    int dim = 0;
    Line line;
  };

  void build(std::int64_t batch);
  // The lines of program_, built at `batch`, from its batch dimensions.
  void lines_from_batch_dims(std::int64_t batch);
  bool scales_follow_the_loss(const Program& p) const;

  RunConfig cfg_;
  Bytes gemm_workspace_ = 0;
  Builder builder_;
  Program program_;
  Liveness liveness_;
  int builds_ = 0;
  std::vector<int> scale_ops_;  // ops that read grad_scale (the loss scale)
  bool scaled_ = false;         // lines known: every batch is read off them
  std::vector<Line> bytes_;     // per tensor
  std::vector<DimLine> dims_;   // the dimensions that move with the batch
  // The structure the lines are for: the one of batch 2 and up; a batch of another is built apart.
  int key_ = 0;
  Program apart_;
  Liveness apart_liveness_;
  bool last_apart_ = false;
  std::optional<Schedule> schedule_, apart_schedule_;
};

}  // namespace vrambench
