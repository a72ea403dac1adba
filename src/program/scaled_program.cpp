// BatchScaledProgram: one build, then each size read off its line in the batch.
#include "program/scaled_program.h"

#include <optional>
#include <utility>

#include "program/signature.h"

namespace vrambench {
namespace {

// a + b * batch, or nullopt when it leaves 64 bits or goes negative.
std::optional<Bytes> on_line(Bytes a, Bytes b, std::int64_t batch) {
  Bytes product = 0;
  Bytes sum = 0;
  if (__builtin_mul_overflow(b, batch, &product) || __builtin_add_overflow(a, product, &sum) ||
      sum < 0)
    return std::nullopt;
  return sum;
}

}  // namespace

BatchScaledProgram::BatchScaledProgram(const RunConfig& cfg, Bytes gemm_workspace, Builder builder)
    : cfg_(cfg),
      gemm_workspace_(gemm_workspace),
      builder_(std::move(builder)),
      key_(structure_key(cfg, 2)) {}

bool BatchScaledProgram::scales_follow_the_loss(const Program& p) const {
  const float scale = step_loss_scale(p.config);
  for (int i : scale_ops_)
    if (p.ops[static_cast<std::size_t>(i)].grad_scale != scale) return false;
  return true;
}

void BatchScaledProgram::lines_from_batch_dims(std::int64_t batch) {
  // A dimension of size s at this batch, growing by p per sample, is the line (s - p * batch) + p
  // * batch; a tensor's bytes are its other dimensions' product times that (in bytes per element),
  // a line with the same factor. Without a batch dimension a tensor's bytes are a constant.
  const Program& p = program_;
  std::vector<Line> bytes(p.tensors.size());
  for (std::size_t i = 0; i < p.tensors.size(); ++i) bytes[i] = Line{p.tensors[i].bytes, 0};
  std::vector<DimLine> dims;
  dims.reserve(p.batch_dims.size());
  int last = -1;
  for (const BatchDim& d : p.batch_dims) {
    // One batch dimension a tensor, each in range: else the bytes are no line (or the marks are
    // not a builder's), and every batch is built.
    if (d.tensor <= last || d.tensor >= static_cast<int>(p.tensors.size()) || d.per_sample <= 0)
      return;
    last = d.tensor;
    const Tensor& t = p.tensors[static_cast<std::size_t>(d.tensor)];
    if (d.dim < 0 || d.dim >= static_cast<int>(t.shape.size())) return;
    const std::int64_t size = t.shape[static_cast<std::size_t>(d.dim)];
    Bytes slope = 0;
    Bytes bytes_slope = 0;
    if (size <= 0 || t.bytes % size != 0 || __builtin_mul_overflow(d.per_sample, batch, &slope) ||
        slope > size || __builtin_mul_overflow(t.bytes / size, d.per_sample, &bytes_slope))
      return;
    Line& b = bytes[static_cast<std::size_t>(d.tensor)];
    b.slope = bytes_slope;
    b.intercept = t.bytes - bytes_slope * batch;  // (size - slope) * bytes per unit of size
    dims.push_back({d.tensor, d.dim, Line{size - slope, d.per_sample}});
  }
  bytes_ = std::move(bytes);
  dims_ = std::move(dims);
  scaled_ = true;
}

void BatchScaledProgram::build(std::int64_t batch) {
  RunConfig at = cfg_;
  at.batch = batch;
  Program built = builder_(at, gemm_workspace_);
  ++builds_;
  program_ = std::move(built);
  if (builds_ > 1) {
    // Without lines, every batch is built (with them, only a batch whose sizes pass 64 bits is,
    // and the builder throws).
    if (!scaled_) {
      liveness_ = compute_liveness(program_);
      schedule_.reset();
    }
    return;
  }
  for (std::size_t i = 0; i < program_.ops.size(); ++i)
    if (signature(program_.ops[i].kind).attrs.grad_scale) scale_ops_.push_back(static_cast<int>(i));
  liveness_ = compute_liveness(program_);
  schedule_.reset();
  if (scales_follow_the_loss(program_)) lines_from_batch_dims(batch);
}

const Schedule& BatchScaledProgram::schedule(int steps) {
  std::optional<Schedule>& cached = last_apart_ ? apart_schedule_ : schedule_;
  if (!cached || cached->steps() != steps)
    cached.emplace(last_apart_ ? apart_ : program_, liveness(), steps);
  return *cached;
}

const Program& BatchScaledProgram::at(std::int64_t batch) {
  last_apart_ = structure_key(cfg_, batch) != key_;
  if (last_apart_) {
    RunConfig at = cfg_;
    at.batch = batch;
    apart_ = builder_(at, gemm_workspace_);
    apart_liveness_ = compute_liveness(apart_);
    apart_schedule_.reset();
    ++builds_;
    return apart_;
  }
  if (scaled_) {
    std::vector<Tensor>& tensors = program_.tensors;
    bool fits_64_bits = true;
    for (std::size_t i = 0; i < tensors.size() && fits_64_bits; ++i) {
      const std::optional<Bytes> bytes = on_line(bytes_[i].intercept, bytes_[i].slope, batch);
      if (bytes) tensors[i].bytes = *bytes;
      fits_64_bits = bytes.has_value();
    }
    for (std::size_t i = 0; i < dims_.size() && fits_64_bits; ++i) {
      const DimLine& d = dims_[i];
      const std::optional<Bytes> size = on_line(d.line.intercept, d.line.slope, batch);
      if (size)
        tensors[static_cast<std::size_t>(d.tensor)].shape[static_cast<std::size_t>(d.dim)] = *size;
      fits_64_bits = size.has_value();
    }
    if (fits_64_bits) {
      program_.config.batch = batch;
      // B*S fits: the tokens' bytes, 4 B S, did (scopes without tokens have no loss scale).
      const float scale = step_loss_scale(program_.config);
      for (int i : scale_ops_) program_.ops[static_cast<std::size_t>(i)].grad_scale = scale;
      return program_;
    }
    // A size past 64 bits: the builder reports it in its own words.
  }
  build(batch);
  return program_;
}

}  // namespace vrambench
