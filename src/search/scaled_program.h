// The step program of one configuration at any batch, for replays that run no executor (the sim
// device, and the replays that tell what a batch needs): a search replays one configuration at
// several batches, and building the program dominates a sim trial, so later batches rewrite the
// tensors' bytes instead of building it again.
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

  // The program at `batch` as far as an allocation replay reads it: the tensors' bytes, roles and
  // names, the ops' names and tensor lists, all equal to build_program's. Shapes and op attributes
  // may be those of another batch: never give it to an executor. The first two batches are built;
  // when both programs have the same structure and every tensor's bytes fall on a line through
  // them, later batches are read off the lines (each tensor's bytes are a product of dimensions
  // holding the batch at most once, or the flash scratch, affine in it). Throws what
  // build_program throws at `batch`. The reference is valid until the next call.
  const Program& at(std::int64_t batch);
  const Liveness& liveness() const { return liveness_; }  // of the program `at` returned last

  int builds() const { return builds_; }  // programs built so far (the rest were scaled)

 private:
  void build(std::int64_t batch);
  bool same_structure(const Program& other) const;

  RunConfig cfg_;
  Bytes gemm_workspace_ = 0;
  Program program_;
  Liveness liveness_;
  int builds_ = 0;
  std::int64_t first_batch_ = 0;
  std::vector<Bytes> first_bytes_;  // per tensor, at first_batch_
  bool scaled_ = false;             // lines known: intercept_ + slope_ * batch
  std::vector<Bytes> intercept_;
  std::vector<Bytes> slope_;
};

}  // namespace vrambench
