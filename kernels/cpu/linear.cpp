// Dense layer in fp32 with a fixed summation order (results do not depend on the machine).
// The forward's dot products keep eight partial sums per output, which the compiler turns into
// vector adds (a single running sum could not be vectorised without reassociation), four outputs
// per pass over an input row, and add the partials in double. The backward's inner loops are axpys
// over contiguous rows; the weight gradient walks the input in chunks of rows that stay in cache
// while every output row is updated. Then the adapters of the linear kinds and of LoRA's
// (cpu/op_table.h), the frozen and adapter GEMMs by a plain strided product accumulated in double.
#include "cpu/linear.h"

#include <algorithm>
#include <vector>

#include "cpu/op_table.h"

namespace vrambench::cpu {
namespace {

constexpr std::int64_t kLanes = 8;

struct Partials {
  float lane[kLanes] = {};
  double total() const {
    double s = 0.0;
    for (float v : lane) s += v;
    return s;
  }
};

}  // namespace

void linear_fwd(float* y, const float* x, const float* w, const float* b, std::int64_t M,
                std::int64_t In, std::int64_t Out) {
  const std::int64_t In_vec = In / kLanes * kLanes;
  for (std::int64_t m = 0; m < M; ++m) {
    const float* xr = x + m * In;
    float* yr = y + m * Out;
    for (std::int64_t o0 = 0; o0 < Out; o0 += 4) {
      const std::int64_t n_out = std::min<std::int64_t>(4, Out - o0);
      Partials p[4];
      for (std::int64_t k = 0; k < n_out; ++k) {
        const float* wr = w + (o0 + k) * In;
        Partials& acc = p[k];
        for (std::int64_t i = 0; i < In_vec; i += kLanes)
          for (std::int64_t l = 0; l < kLanes; ++l) acc.lane[l] += xr[i + l] * wr[i + l];
        for (std::int64_t i = In_vec; i < In; ++i) acc.lane[i - In_vec] += xr[i] * wr[i];
      }
      for (std::int64_t k = 0; k < n_out; ++k)
        yr[o0 + k] = static_cast<float>(p[k].total() + (b ? b[o0 + k] : 0.0));
    }
  }
}

void linear_bwd(float* dx, float* dw, float* db, const float* dy, const float* x, const float* w,
                std::int64_t M, std::int64_t In, std::int64_t Out) {
  // dx[m,:] = sum_o dy[m,o] w[o,:]
  for (std::int64_t m = 0; m < M; ++m) {
    const float* g = dy + m * Out;
    float* dxr = dx + m * In;
    std::fill(dxr, dxr + In, 0.0f);
    for (std::int64_t o = 0; o < Out; ++o) {
      const float go = g[o];
      if (go == 0.0f) continue;
      const float* wr = w + o * In;
      for (std::int64_t i = 0; i < In; ++i) dxr[i] += go * wr[i];
    }
  }
  // dw[o,:] = sum_m dy[m,o] x[m,:], db[o] = sum_m dy[m,o]
  constexpr std::int64_t kRowChunk = 32;
  std::fill(dw, dw + Out * In, 0.0f);
  std::vector<double> acc_b(static_cast<std::size_t>(Out), 0.0);
  for (std::int64_t m0 = 0; m0 < M; m0 += kRowChunk) {
    const std::int64_t m1 = std::min(M, m0 + kRowChunk);
    for (std::int64_t o = 0; o < Out; ++o) {
      float* dwr = dw + o * In;
      for (std::int64_t m = m0; m < m1; ++m) {
        const float go = dy[m * Out + o];
        if (go == 0.0f) continue;
        const float* xr = x + m * In;
        for (std::int64_t i = 0; i < In; ++i) dwr[i] += go * xr[i];
        acc_b[static_cast<std::size_t>(o)] += go;
      }
    }
  }
  if (db)
    for (std::int64_t o = 0; o < Out; ++o)
      db[o] = static_cast<float>(acc_b[static_cast<std::size_t>(o)]);
}

}  // namespace vrambench::cpu

namespace vrambench {
namespace {

// c[M,N] = sum over k of a(m, k) b(k, n), the operands read through their strides (row, column),
// so a transpose is a swap of strides; accumulated in double.
void matmul(float* c, const float* a, std::int64_t a_row, std::int64_t a_col, const float* b,
            std::int64_t b_row, std::int64_t b_col, std::int64_t M, std::int64_t K,
            std::int64_t N) {
  for (std::int64_t m = 0; m < M; ++m)
    for (std::int64_t n = 0; n < N; ++n) {
      double sum = 0.0;
      for (std::int64_t k = 0; k < K; ++k)
        sum += static_cast<double>(a[m * a_row + k * a_col]) * b[k * b_row + n * b_col];
      c[m * N + n] = static_cast<float>(sum);
    }
}

}  // namespace

void cpu_run_linear_fwd(const Operands& a, CpuContext&) {
  const LinearDims d = linear_dims(a);
  const auto x = cpu::load(a.in[0]), w = cpu::load(a.in[1]);
  const auto b = a.in.size() == 3 ? cpu::load(a.in[2]) : std::vector<float>{};
  auto y = cpu::zeros_like(a.out[0]);
  cpu::linear_fwd(y.data(), x.data(), w.data(), b.empty() ? nullptr : b.data(), d.M, d.In, d.Out);
  cpu::store_out(a, 0, y);
}

void cpu_run_linear_bwd(const Operands& a, CpuContext&) {
  const LinearDims d = linear_dims(a);
  const auto dy = cpu::load(a.in[0]), x = cpu::load(a.in[1]), w = cpu::load(a.in[2]);
  auto dx = cpu::zeros_like(a.out[0]), dw = cpu::zeros_like(a.out[1]);
  std::vector<float> db(static_cast<std::size_t>(d.Out));
  cpu::linear_bwd(dx.data(), dw.data(), db.data(), dy.data(), x.data(), w.data(), d.M, d.In, d.Out);
  cpu::store_out(a, 0, dx);
  cpu::store_out(a, 1, dw);
  if (a.out.size() == 3) cpu::store_out(a, 2, db);
}

void cpu_run_linear_dgrad(const Operands& a, CpuContext&) {
  const LinearDims d = linear_dims(a);
  const auto dy = cpu::load(a.in[0]), w = cpu::load(a.in[1]);
  auto dx = cpu::zeros_like(a.out[0]);
  matmul(dx.data(), dy.data(), d.Out, 1, w.data(), d.In, 1, d.M, d.Out, d.In);
  cpu::store_out(a, 0, dx);
}

// xa = x a^T; y[:, cols] += scale xa b^T (from xa as stored).
void cpu_run_lora_fwd(const Operands& a, CpuContext&) {
  const Op& op = a.op;
  const LoraDims s = lora_dims(a);
  const auto x = cpu::load(a.in[0]), A = cpu::load(a.in[1]), B = cpu::load(a.in[2]);
  auto xa = cpu::zeros_like(a.out[0]);
  matmul(xa.data(), x.data(), s.In, 1, A.data(), 1, s.In, s.M, s.In, s.R);
  cpu::store(a.out[0], xa, false);
  xa = cpu::load(a.out[0]);
  std::vector<float> delta(static_cast<std::size_t>(s.M * s.N));
  matmul(delta.data(), xa.data(), s.R, 1, B.data(), 1, s.R, s.M, s.R, s.N);
  auto y = cpu::load(a.in[3]);
  for (std::int64_t m = 0; m < s.M; ++m)
    for (std::int64_t n = 0; n < s.N; ++n)
      y[static_cast<std::size_t>(m * s.Out + op.col_offset + n)] +=
          op.lora_scale * delta[static_cast<std::size_t>(m * s.N + n)];
  cpu::store(a.out[1], y, false);
}

// g = scale dy[:, cols]; db = g^T xa; dxa = g b; da = dxa^T x; dx (+)= dxa a. The adapter's
// gradients are written; dx is added into the frozen base's when the op accumulates.
void cpu_run_lora_bwd(const Operands& a, CpuContext&) {
  const Op& op = a.op;
  const LoraDims s = lora_dims(a);
  const auto dy = cpu::load(a.in[0]), x = cpu::load(a.in[1]), xa = cpu::load(a.in[2]),
             A = cpu::load(a.in[3]), B = cpu::load(a.in[4]);
  std::vector<float> g(static_cast<std::size_t>(s.M * s.N));
  for (std::int64_t m = 0; m < s.M; ++m)
    for (std::int64_t n = 0; n < s.N; ++n)
      g[static_cast<std::size_t>(m * s.N + n)] =
          op.lora_scale * dy[static_cast<std::size_t>(m * s.Out + op.col_offset + n)];
  auto dB = cpu::zeros_like(a.out[1]);
  matmul(dB.data(), g.data(), 1, s.N, xa.data(), s.R, 1, s.N, s.M, s.R);
  auto dxa = cpu::zeros_like(a.out[2]);
  matmul(dxa.data(), g.data(), s.N, 1, B.data(), s.R, 1, s.M, s.N, s.R);
  cpu::store(a.out[2], dxa, false);
  dxa = cpu::load(a.out[2]);  // as stored: what the CUDA GEMMs read
  auto dA = cpu::zeros_like(a.out[0]);
  matmul(dA.data(), dxa.data(), 1, s.R, x.data(), s.In, 1, s.R, s.M, s.In);
  cpu::store(a.out[0], dA, false);
  cpu::store(a.out[1], dB, false);
  if (a.out.size() == 4) {
    auto dx = cpu::zeros_like(a.out[3]);
    matmul(dx.data(), dxa.data(), s.R, 1, A.data(), s.In, 1, s.M, s.R, s.In);
    cpu::store(a.out[3], dx, op.accumulate);
  }
}

}  // namespace vrambench
