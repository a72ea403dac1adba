// BatchScaledProgram: two builds, then each size read off its line in the batch.
#include "search/scaled_program.h"

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

BatchScaledProgram::BatchScaledProgram(const RunConfig& cfg, Bytes gemm_workspace)
    : cfg_(cfg), gemm_workspace_(gemm_workspace), key_(structure_key(cfg, 2)) {}

bool BatchScaledProgram::same_structure(const Program& other) const {
  const Program& p = program_;
  if (p.tensors.size() != other.tensors.size() || p.ops.size() != other.ops.size() ||
      p.loss_tensor != other.loss_tensor || p.output_grad_tensor != other.output_grad_tensor)
    return false;
  for (std::size_t i = 0; i < p.tensors.size(); ++i) {
    const Tensor& a = p.tensors[i];
    const Tensor& b = other.tensors[i];
    if (a.id != b.id || a.role != b.role || a.dtype != b.dtype || a.name != b.name ||
        a.shape.size() != b.shape.size())
      return false;
  }
  // Every op whole, but the loss scale of the ops that read it (scales_follow_the_loss).
  for (std::size_t i = 0; i < p.ops.size(); ++i) {
    const Op& a = p.ops[i];
    const Op& b = other.ops[i];
    if (a.kind != b.kind) return false;
    if (signature(a.kind).attrs.grad_scale && a.grad_scale != b.grad_scale) {
      Op with_b_scale = a;
      with_b_scale.grad_scale = b.grad_scale;
      if (!(with_b_scale == b)) return false;
    } else if (!(a == b)) {
      return false;
    }
  }
  return true;
}

bool BatchScaledProgram::scales_follow_the_loss(const Program& p) const {
  const float scale = step_loss_scale(p.config);
  for (int i : scale_ops_)
    if (p.ops[static_cast<std::size_t>(i)].grad_scale != scale) return false;
  return true;
}

void BatchScaledProgram::fit_lines(const Program& second, std::int64_t batch) {
  // The lines through program_ (built at first_batch_) and `second`, when every slope is a whole
  // number of bytes (or elements) per sample and no line starts below zero.
  const Program& first = program_;
  const std::int64_t run = batch - first_batch_;
  auto line = [&](Bytes a, Bytes b) -> std::optional<Line> {
    const Bytes rise = b - a;
    if (rise % run != 0) return std::nullopt;
    Line l{0, rise / run};
    l.intercept = a - l.slope * first_batch_;
    if (l.intercept < 0) return std::nullopt;
    return l;
  };
  const std::size_t n = second.tensors.size();
  std::vector<Line> bytes(n);
  std::vector<DimLine> dims;
  for (std::size_t i = 0; i < n; ++i) {
    const Tensor& a = first.tensors[i];
    const Tensor& b = second.tensors[i];
    const std::optional<Line> l = line(a.bytes, b.bytes);
    if (!l) return;
    bytes[i] = *l;
    for (std::size_t d = 0; d < a.shape.size(); ++d) {
      if (a.shape[d] == b.shape[d]) continue;
      const std::optional<Line> dim = line(a.shape[d], b.shape[d]);
      if (!dim) return;
      dims.push_back({static_cast<int>(i), static_cast<int>(d), *dim});
    }
  }
  bytes_ = std::move(bytes);
  dims_ = std::move(dims);
  scaled_ = true;
}

void BatchScaledProgram::build(std::int64_t batch) {
  RunConfig at = cfg_;
  at.batch = batch;
  Program built = build_program(at, gemm_workspace_);
  ++builds_;
  if (builds_ == 1) {
    first_batch_ = batch;
    for (std::size_t i = 0; i < built.ops.size(); ++i)
      if (signature(built.ops[i].kind).attrs.grad_scale) scale_ops_.push_back(static_cast<int>(i));
  }
  const bool same = builds_ > 1 && same_structure(built);
  if (!same) scaled_ = false;  // the lines were of another structure
  if (builds_ == 2 && same && batch != first_batch_ && scales_follow_the_loss(program_) &&
      scales_follow_the_loss(built))
    fit_lines(built, batch);
  program_ = std::move(built);
  if (!same) liveness_ = compute_liveness(program_);
}

const Program& BatchScaledProgram::at(std::int64_t batch) {
  last_apart_ = structure_key(cfg_, batch) != key_;
  if (last_apart_) {
    RunConfig at = cfg_;
    at.batch = batch;
    apart_ = build_program(at, gemm_workspace_);
    apart_liveness_ = compute_liveness(apart_);
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
