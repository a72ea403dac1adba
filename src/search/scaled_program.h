// The step program of one configuration at any batch, for replays that run no executor (the sim
// device, and the replays that tell what a batch needs): a search replays one configuration at
// several batches, and building the program dominates a sim trial, so later batches rewrite the
// sizes that depend on the batch instead of building it again.
#pragma once

#include <cstdint>
#include <vector>

#include "core/config.h"
#include "core/units.h"
#include "program/program.h"

namespace vrambench {

class BatchScaledProgram {
 public:
  BatchScaledProgram(const RunConfig& cfg, Bytes gemm_workspace);

  // The program build_program gives at `batch` (cfg at that batch, which validate() accepts):
  // every tensor's bytes and shape, every op with its attributes, the config. The first two
  // batches are built; when both programs have the same structure (names, roles, dtypes, ranks,
  // ops and their attributes), every tensor's bytes and every dimension fall on a line through
  // them, and the loss scale is step_loss_scale's, later batches are read off the lines (a
  // tensor's bytes are a product of dimensions holding the batch at most once, or the flash
  // scratch, affine in it; a dimension is B, B*S or that scratch) and the loss scale is worked out
  // again. Throws what build_program throws at `batch`. The reference is valid until the next call.
  // A batch whose program has another structure (structure_key: hf's gpt2 eager attention at
  // batch 1) is built on its own, leaving the lines of the others as they are.
  const Program& at(std::int64_t batch);
  // Of the program `at` returned last.
  const Liveness& liveness() const { return last_apart_ ? apart_liveness_ : liveness_; }

  int builds() const { return builds_; }  // programs built so far (the rest were scaled)

 private:
  // One tensor size on a line in the batch: intercept + slope * batch.
  struct Line {
    Bytes intercept = 0;
    Bytes slope = 0;
  };
  // A dimension that differs between the two builds: shape[dim] of tensor `tensor`.
  struct DimLine {
    int tensor = 0;
    int dim = 0;
    Line line;
  };

  void build(std::int64_t batch);
  bool same_structure(const Program& other) const;
  // Fits the lines through program_ (the first build) and `second`, built at `batch`.
  void fit_lines(const Program& second, std::int64_t batch);
  bool scales_follow_the_loss(const Program& p) const;

  RunConfig cfg_;
  Bytes gemm_workspace_ = 0;
  Program program_;
  Liveness liveness_;
  int builds_ = 0;
  std::int64_t first_batch_ = 0;
  std::vector<int> scale_ops_;  // ops that read grad_scale (the loss scale)
  bool scaled_ = false;         // lines known: every batch is read off them
  std::vector<Line> bytes_;     // per tensor
  std::vector<DimLine> dims_;   // the dimensions that move with the batch
  // The structure the lines are for: the one of batch 2 and up; a batch of another is built apart.
  int key_ = 0;
  Program apart_;
  Liveness apart_liveness_;
  bool last_apart_ = false;
};

}  // namespace vrambench
