// Quantised weights and 8-bit AdamW (core/quant_layout.h, kernels/common/quant_math.h,
// kernels/cpu/quant.h): the sizes worked out by hand, the code tables against bitsandbytes' own
// values and the QLoRA construction, round-trip error bounds of NF4 / FP4 / int8 on random normal
// weights, double quantisation, the lane split the GPU kernels use, and 8-bit AdamW against fp32
// AdamW.
#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdint>
#include <limits>
#include <vector>

#include "common/init_values.h"
#include "common/math.h"
#include "common/quant_math.h"
#include "core/error.h"
#include "core/quant_layout.h"
#include "core/units.h"
#include "cpu/optimizer.h"
#include "cpu/quant.h"
#include "quant_weight.h"

namespace vrambench {
namespace {

// ---- reference data ----------------------------------------------------------------------------

// bitsandbytes functional.py create_dynamic_map(signed=True) and (signed=False) as the library
// computes them (its function run under torch 2.15 on the CPU), printed as exact float32 values.
constexpr float kSignedDynamicMap[256] = {
    -0x1.fc6666p-1f,  -0x1.f53334p-1f,  -0x1.eep-1f,      -0x1.e6ccccp-1f,  -0x1.df999ap-1f,
    -0x1.d86666p-1f,  -0x1.d13334p-1f,  -0x1.cap-1f,      -0x1.c2ccccp-1f,  -0x1.bb999ap-1f,
    -0x1.b46666p-1f,  -0x1.ad3334p-1f,  -0x1.a6p-1f,      -0x1.9eccccp-1f,  -0x1.97999ap-1f,
    -0x1.906666p-1f,  -0x1.893334p-1f,  -0x1.82p-1f,      -0x1.7accccp-1f,  -0x1.73999ap-1f,
    -0x1.6c6668p-1f,  -0x1.653334p-1f,  -0x1.5ep-1f,      -0x1.56ccccp-1f,  -0x1.4f999ap-1f,
    -0x1.486668p-1f,  -0x1.413334p-1f,  -0x1.3ap-1f,      -0x1.32ccccp-1f,  -0x1.2b999ap-1f,
    -0x1.246668p-1f,  -0x1.1d3334p-1f,  -0x1.16p-1f,      -0x1.0eccccp-1f,  -0x1.079998p-1f,
    -0x1.006666p-1f,  -0x1.f26664p-2f,  -0x1.e4p-2f,      -0x1.d59998p-2f,  -0x1.c73334p-2f,
    -0x1.b8ccccp-2f,  -0x1.aa6666p-2f,  -0x1.9cp-2f,      -0x1.8d9998p-2f,  -0x1.7f3334p-2f,
    -0x1.70ccccp-2f,  -0x1.626666p-2f,  -0x1.54p-2f,      -0x1.459998p-2f,  -0x1.373334p-2f,
    -0x1.28ccccp-2f,  -0x1.1a6668p-2f,  -0x1.0cp-2f,      -0x1.fb3332p-3f,  -0x1.de6666p-3f,
    -0x1.c1999ap-3f,  -0x1.a4ccccp-3f,  -0x1.88p-3f,      -0x1.6b3334p-3f,  -0x1.4e6666p-3f,
    -0x1.31999ap-3f,  -0x1.14ccccp-3f,  -0x1.fp-4f,       -0x1.b66668p-4f,  -0x1.93d70ap-4f,
    -0x1.8851eep-4f,  -0x1.7ccccep-4f,  -0x1.7147aep-4f,  -0x1.65c29p-4f,   -0x1.5a3d7p-4f,
    -0x1.4eb854p-4f,  -0x1.433334p-4f,  -0x1.37ae14p-4f,  -0x1.2c28f6p-4f,  -0x1.20a3d6p-4f,
    -0x1.151ebap-4f,  -0x1.09999ap-4f,  -0x1.fc28f6p-5f,  -0x1.e51ebap-5f,  -0x1.ce147ap-5f,
    -0x1.b70a3ep-5f,  -0x1.ap-5f,       -0x1.88f5c2p-5f,  -0x1.71eb86p-5f,  -0x1.5ae146p-5f,
    -0x1.43d70ap-5f,  -0x1.2ccccep-5f,  -0x1.15c29p-5f,   -0x1.fd70a4p-6f,  -0x1.cf5c2ap-6f,
    -0x1.a147aep-6f,  -0x1.733334p-6f,  -0x1.451ebap-6f,  -0x1.170a3ep-6f,  -0x1.d1eb86p-7f,
    -0x1.75c29p-7f,   -0x1.3e76c8p-7f,  -0x1.2c083p-7f,   -0x1.19999ap-7f,  -0x1.072b02p-7f,
    -0x1.e978d4p-8f,  -0x1.c49ba6p-8f,  -0x1.9fbe76p-8f,  -0x1.7ae148p-8f,  -0x1.56041ap-8f,
    -0x1.3126e8p-8f,  -0x1.0c49bap-8f,  -0x1.ced914p-9f,  -0x1.851eb8p-9f,  -0x1.3b645ap-9f,
    -0x1.e353f8p-10f, -0x1.4fdf3ap-10f, -0x1.eecbfep-11f, -0x1.b3d07cp-11f, -0x1.78d5p-11f,
    -0x1.3dd982p-11f, -0x1.02de02p-11f, -0x1.8fc506p-12f, -0x1.19ce0ap-12f, -0x1.47ae16p-13f,
    -0x1.743e96p-14f, -0x1.15df66p-14f, -0x1.6f0068p-15f, -0x1.64840cp-16f, -0x1.040bfep-17f,
    -0x1.b43528p-19f, -0x1.27476ep-21f, 0x0p+0f,          0x1.27476ep-21f,  0x1.b43528p-19f,
    0x1.040bfep-17f,  0x1.64840cp-16f,  0x1.6f0068p-15f,  0x1.15df66p-14f,  0x1.743e96p-14f,
    0x1.47ae16p-13f,  0x1.19ce0ap-12f,  0x1.8fc506p-12f,  0x1.02de02p-11f,  0x1.3dd982p-11f,
    0x1.78d5p-11f,    0x1.b3d07cp-11f,  0x1.eecbfep-11f,  0x1.4fdf3ap-10f,  0x1.e353f8p-10f,
    0x1.3b645ap-9f,   0x1.851eb8p-9f,   0x1.ced914p-9f,   0x1.0c49bap-8f,   0x1.3126e8p-8f,
    0x1.56041ap-8f,   0x1.7ae148p-8f,   0x1.9fbe76p-8f,   0x1.c49ba6p-8f,   0x1.e978d4p-8f,
    0x1.072b02p-7f,   0x1.19999ap-7f,   0x1.2c083p-7f,    0x1.3e76c8p-7f,   0x1.75c29p-7f,
    0x1.d1eb86p-7f,   0x1.170a3ep-6f,   0x1.451ebap-6f,   0x1.733334p-6f,   0x1.a147aep-6f,
    0x1.cf5c2ap-6f,   0x1.fd70a4p-6f,   0x1.15c29p-5f,    0x1.2ccccep-5f,   0x1.43d70ap-5f,
    0x1.5ae146p-5f,   0x1.71eb86p-5f,   0x1.88f5c2p-5f,   0x1.ap-5f,        0x1.b70a3ep-5f,
    0x1.ce147ap-5f,   0x1.e51ebap-5f,   0x1.fc28f6p-5f,   0x1.09999ap-4f,   0x1.151ebap-4f,
    0x1.20a3d6p-4f,   0x1.2c28f6p-4f,   0x1.37ae14p-4f,   0x1.433334p-4f,   0x1.4eb854p-4f,
    0x1.5a3d7p-4f,    0x1.65c29p-4f,    0x1.7147aep-4f,   0x1.7ccccep-4f,   0x1.8851eep-4f,
    0x1.93d70ap-4f,   0x1.b66668p-4f,   0x1.fp-4f,        0x1.14ccccp-3f,   0x1.31999ap-3f,
    0x1.4e6666p-3f,   0x1.6b3334p-3f,   0x1.88p-3f,       0x1.a4ccccp-3f,   0x1.c1999ap-3f,
    0x1.de6666p-3f,   0x1.fb3332p-3f,   0x1.0cp-2f,       0x1.1a6668p-2f,   0x1.28ccccp-2f,
    0x1.373334p-2f,   0x1.459998p-2f,   0x1.54p-2f,       0x1.626666p-2f,   0x1.70ccccp-2f,
    0x1.7f3334p-2f,   0x1.8d9998p-2f,   0x1.9cp-2f,       0x1.aa6666p-2f,   0x1.b8ccccp-2f,
    0x1.c73334p-2f,   0x1.d59998p-2f,   0x1.e4p-2f,       0x1.f26664p-2f,   0x1.006666p-1f,
    0x1.079998p-1f,   0x1.0eccccp-1f,   0x1.16p-1f,       0x1.1d3334p-1f,   0x1.246668p-1f,
    0x1.2b999ap-1f,   0x1.32ccccp-1f,   0x1.3ap-1f,       0x1.413334p-1f,   0x1.486668p-1f,
    0x1.4f999ap-1f,   0x1.56ccccp-1f,   0x1.5ep-1f,       0x1.653334p-1f,   0x1.6c6668p-1f,
    0x1.73999ap-1f,   0x1.7accccp-1f,   0x1.82p-1f,       0x1.893334p-1f,   0x1.906666p-1f,
    0x1.97999ap-1f,   0x1.9eccccp-1f,   0x1.a6p-1f,       0x1.ad3334p-1f,   0x1.b46666p-1f,
    0x1.bb999ap-1f,   0x1.c2ccccp-1f,   0x1.cap-1f,       0x1.d13334p-1f,   0x1.d86666p-1f,
    0x1.df999ap-1f,   0x1.e6ccccp-1f,   0x1.eep-1f,       0x1.f53334p-1f,   0x1.fc6666p-1f,
    0x1p+0f,
};
constexpr float kUnsignedDynamicMap[256] = {
    0x0p+0f,         0x1.5cf754p-22f, 0x1.a0133p-21f,  0x1.1d367p-19f,  0x1.2599ecp-18f,
    0x1.bc98a2p-18f, 0x1.29cbaap-17f, 0x1.0624dcp-16f, 0x1.c2e34p-16f,  0x1.3fd0dp-15f,
    0x1.9e3p-15f,    0x1.fc8f34p-15f, 0x1.2d7732p-14f, 0x1.5ca6c8p-14f, 0x1.8bd662p-14f,
    0x1.0cb296p-13f, 0x1.82a994p-13f, 0x1.f8a092p-13f, 0x1.374bc8p-12f, 0x1.724744p-12f,
    0x1.ad42c6p-12f, 0x1.e83e44p-12f, 0x1.119ce2p-11f, 0x1.2f1aap-11f,  0x1.4c986p-11f,
    0x1.6a162p-11f,  0x1.8793dep-11f, 0x1.a511ap-11f,  0x1.c28f5ep-11f, 0x1.e00d1cp-11f,
    0x1.fd8adcp-11f, 0x1.2b020cp-10f, 0x1.74bc6ap-10f, 0x1.be76c8p-10f, 0x1.041894p-9f,
    0x1.28f5c2p-9f,  0x1.4dd2fp-9f,   0x1.72b02p-9f,   0x1.978d4ep-9f,  0x1.bc6a8p-9f,
    0x1.e147aep-9f,  0x1.03126ep-8f,  0x1.158104p-8f,  0x1.27ef9ep-8f,  0x1.3a5e34p-8f,
    0x1.4cccccp-8f,  0x1.5f3b64p-8f,  0x1.71a9fap-8f,  0x1.841894p-8f,  0x1.96872ap-8f,
    0x1.a8f5c2p-8f,  0x1.bb645cp-8f,  0x1.cdd2fp-8f,   0x1.e0418ap-8f,  0x1.f2b01ep-8f,
    0x1.028f5cp-7f,  0x1.0bc6a8p-7f,  0x1.14fdf2p-7f,  0x1.1e354p-7f,   0x1.276c8ap-7f,
    0x1.30a3d6p-7f,  0x1.39db24p-7f,  0x1.43126ep-7f,  0x1.5eb854p-7f,  0x1.8ccccep-7f,
    0x1.bae146p-7f,  0x1.e8f5c4p-7f,  0x1.0b851ep-6f,  0x1.228f5ep-6f,  0x1.39999ap-6f,
    0x1.50a3d6p-6f,  0x1.67ae16p-6f,  0x1.7eb852p-6f,  0x1.95c28ep-6f,  0x1.accccep-6f,
    0x1.c3d70ep-6f,  0x1.dae146p-6f,  0x1.f1eb86p-6f,  0x1.047aep-5f,   0x1.1p-5f,
    0x1.1b851ep-5f,  0x1.270a3ep-5f,  0x1.328f5ep-5f,  0x1.3e147ap-5f,  0x1.49999ap-5f,
    0x1.551eb8p-5f,  0x1.60a3d6p-5f,  0x1.6c28f6p-5f,  0x1.77ae14p-5f,  0x1.833334p-5f,
    0x1.8eb85p-5f,   0x1.9a3d7p-5f,   0x1.a5c28ep-5f,  0x1.b147aep-5f,  0x1.bccccep-5f,
    0x1.c851eep-5f,  0x1.d3d70ep-5f,  0x1.df5c2ap-5f,  0x1.eae146p-5f,  0x1.f66666p-5f,
    0x1.00f5c4p-4f,  0x1.06b854p-4f,  0x1.0c7ae2p-4f,  0x1.123d7p-4f,   0x1.18p-4f,
    0x1.1dc29p-4f,   0x1.23852p-4f,   0x1.2947aep-4f,  0x1.2f0a3ep-4f,  0x1.34cccep-4f,
    0x1.3a8f5ep-4f,  0x1.4051ecp-4f,  0x1.46147cp-4f,  0x1.4bd70ap-4f,  0x1.51999ap-4f,
    0x1.575c2ap-4f,  0x1.5d1eb8p-4f,  0x1.62e148p-4f,  0x1.68a3d6p-4f,  0x1.6e6666p-4f,
    0x1.7428f6p-4f,  0x1.79eb86p-4f,  0x1.7fae16p-4f,  0x1.8570a4p-4f,  0x1.8b3334p-4f,
    0x1.90f5c4p-4f,  0x1.96b852p-4f,  0x1.a8p-4f,      0x1.c4ccccp-4f,  0x1.e1999ap-4f,
    0x1.fe6666p-4f,  0x1.0d9998p-3f,  0x1.1cp-3f,      0x1.2a6668p-3f,  0x1.38ccccp-3f,
    0x1.473334p-3f,  0x1.559998p-3f,  0x1.64p-3f,      0x1.726668p-3f,  0x1.80ccccp-3f,
    0x1.8f3334p-3f,  0x1.9d9998p-3f,  0x1.acp-3f,      0x1.ba6668p-3f,  0x1.c8ccccp-3f,
    0x1.d73334p-3f,  0x1.e59998p-3f,  0x1.f4p-3f,      0x1.013332p-2f,  0x1.086666p-2f,
    0x1.0f999ap-2f,  0x1.16ccccp-2f,  0x1.1ep-2f,      0x1.253334p-2f,  0x1.2c6666p-2f,
    0x1.339998p-2f,  0x1.3accccp-2f,  0x1.42p-2f,      0x1.493334p-2f,  0x1.506666p-2f,
    0x1.579998p-2f,  0x1.5eccccp-2f,  0x1.66p-2f,      0x1.6d3334p-2f,  0x1.746666p-2f,
    0x1.7b9998p-2f,  0x1.82ccccp-2f,  0x1.8ap-2f,      0x1.913334p-2f,  0x1.986666p-2f,
    0x1.9f9998p-2f,  0x1.a6ccccp-2f,  0x1.aep-2f,      0x1.b53334p-2f,  0x1.bc6666p-2f,
    0x1.c39998p-2f,  0x1.caccccp-2f,  0x1.d2p-2f,      0x1.d93334p-2f,  0x1.e06666p-2f,
    0x1.e79998p-2f,  0x1.eeccccp-2f,  0x1.f6p-2f,      0x1.fd3332p-2f,  0x1.023334p-1f,
    0x1.05ccccp-1f,  0x1.096666p-1f,  0x1.0dp-1f,      0x1.109998p-1f,  0x1.143334p-1f,
    0x1.17ccccp-1f,  0x1.1b6668p-1f,  0x1.1fp-1f,      0x1.22999ap-1f,  0x1.263334p-1f,
    0x1.29ccccp-1f,  0x1.2d6668p-1f,  0x1.31p-1f,      0x1.34999ap-1f,  0x1.383334p-1f,
    0x1.3bccccp-1f,  0x1.3f6668p-1f,  0x1.43p-1f,      0x1.46999ap-1f,  0x1.4a3334p-1f,
    0x1.4dccccp-1f,  0x1.516668p-1f,  0x1.55p-1f,      0x1.58999ap-1f,  0x1.5c3334p-1f,
    0x1.5fccccp-1f,  0x1.636668p-1f,  0x1.67p-1f,      0x1.6a999ap-1f,  0x1.6e3334p-1f,
    0x1.71ccccp-1f,  0x1.756668p-1f,  0x1.79p-1f,      0x1.7c999ap-1f,  0x1.803334p-1f,
    0x1.83ccccp-1f,  0x1.876668p-1f,  0x1.8bp-1f,      0x1.8e9998p-1f,  0x1.923334p-1f,
    0x1.95ccccp-1f,  0x1.996668p-1f,  0x1.9dp-1f,      0x1.a09998p-1f,  0x1.a43334p-1f,
    0x1.a7ccccp-1f,  0x1.ab6668p-1f,  0x1.afp-1f,      0x1.b29998p-1f,  0x1.b63334p-1f,
    0x1.b9ccccp-1f,  0x1.bd6668p-1f,  0x1.c1p-1f,      0x1.c49998p-1f,  0x1.c83334p-1f,
    0x1.cbccccp-1f,  0x1.cf6668p-1f,  0x1.d3p-1f,      0x1.d69998p-1f,  0x1.da3334p-1f,
    0x1.ddccccp-1f,  0x1.e16668p-1f,  0x1.e5p-1f,      0x1.e89998p-1f,  0x1.ec3334p-1f,
    0x1.efccccp-1f,  0x1.f36668p-1f,  0x1.f7p-1f,      0x1.fa9998p-1f,  0x1.fe3334p-1f,
    0x1p+0f,
};

// The 16 NF4 levels the QLoRA construction gives (functional.py create_normal_map, offset
// 0.9677083, use_extra_value): 8 positive quantiles of N(0, 1) at linspace(offset, 0.5, 9)[:-1],
// 7 negative at -linspace(offset, 0.5, 8)[:-1], zero; sorted and divided by the largest. The
// inverse CDF by bisection of Phi(x) = erfc(-x / sqrt 2) / 2, in double.
double normal_quantile(double p) {
  double lo = -10.0, hi = 10.0;
  for (int i = 0; i < 200; ++i) {
    const double mid = 0.5 * (lo + hi);
    (0.5 * std::erfc(-mid / std::sqrt(2.0)) < p ? lo : hi) = mid;
  }
  return 0.5 * (lo + hi);
}
std::vector<double> qlora_nf4_levels() {
  const double offset = 0.9677083;
  std::vector<double> v{0.0};
  for (int k = 0; k < 8; ++k) v.push_back(normal_quantile(offset + (0.5 - offset) * k / 8.0));
  for (int k = 0; k < 7; ++k) v.push_back(-normal_quantile(offset + (0.5 - offset) * k / 7.0));
  std::sort(v.begin(), v.end());
  const double top = v.back();
  for (double& x : v) x /= top;
  return v;
}

// Weights of a linear layer: 0.02 * N(0, 1) (the usual initialisation scale), deterministic.
std::vector<float> normal_weights(std::int64_t n, std::uint64_t stream, float scale = 0.02f) {
  std::vector<float> w(static_cast<std::size_t>(n));
  for (std::int64_t i = 0; i < n; ++i) w[i] = scale * kmath::standard_normal(stream, i);
  return w;
}

// The levels of a 4-bit kind, indexed by code, and the largest gap between adjacent ones.
std::array<float, 16> levels_of(QuantKind kind) {
  std::array<float, 16> t{};
  for (int c = 0; c < 16; ++c) t[c] = kquant::level_4bit(kind, c);
  return t;
}
double largest_gap(std::array<float, 16> levels) {
  std::sort(levels.begin(), levels.end());
  double gap = 0.0;
  for (int c = 0; c + 1 < 16; ++c)
    gap = std::max(gap, static_cast<double>(levels[c + 1] - levels[c]));
  return gap;
}

// Distance from x to the nearest of `values` (brute force, double).
template <typename Values>
double nearest_distance(const Values& values, double x) {
  double best = std::numeric_limits<double>::infinity();
  for (float v : values) best = std::min(best, std::fabs(x - static_cast<double>(v)));
  return best;
}

using test::QuantizedWeight;

// ---- sizes -------------------------------------------------------------------------------------

TEST(QuantSizes, Nf4SquareWeightWithAndWithoutDoubleQuant) {
  // 4096 x 4096 = 16,777,216 weights: 4 bits each = 8 MiB of codes; 16,777,216 / 64 = 262,144
  // blocks, an fp32 absmax each = 1 MiB; the 16-entry fp32 code table = 64 bytes.
  const std::int64_t n = 4096LL * 4096;
  const QuantizedWeightBytes single = quantized_weight_bytes(n, 4096, QuantKind::nf4, false);
  EXPECT_EQ(single.data, 8 * MiB);
  EXPECT_EQ(single.absmax, 1 * MiB);
  EXPECT_EQ(single.absmax2, 0);
  EXPECT_EQ(single.code_and_offset, 64);
  EXPECT_EQ(single.total, 8 * MiB + 1 * MiB + 64);  // 9,437,248
  EXPECT_EQ(single.nested_absmax_transient, 0);
  // Double quant: the 262,144 absmax become one byte each (256 KiB); 262,144 / 256 = 1,024
  // second-level fp32 absmax = 4,096 bytes; constants 64 (4-bit table) + 1,024 (256-entry fp32
  // dynamic map) + 4 (offset) = 1,092. Total 8,388,608 + 262,144 + 4,096 + 1,092 = 8,655,940.
  const QuantizedWeightBytes nested = quantized_weight_bytes(n, 4096, QuantKind::nf4, true);
  EXPECT_EQ(nested.data, 8 * MiB);
  EXPECT_EQ(nested.absmax, 256 * KiB);
  EXPECT_EQ(nested.absmax2, 4096);
  EXPECT_EQ(nested.code_and_offset, 1092);
  EXPECT_EQ(nested.total, 8655940);
  EXPECT_EQ(nested.nested_absmax_transient, 1 * MiB);
  // 8,655,940 * 8 / 16,777,216 = 4.127 bits per weight: 4 + 8/64 + 32/(64*256), as QLoRA says.
  EXPECT_NEAR(static_cast<double>(nested.total) * 8.0 / static_cast<double>(n), 4.127, 1e-3);
  // FP4 stores the same amounts.
  EXPECT_EQ(quantized_weight_bytes(n, 4096, QuantKind::fp4, true), nested);
  EXPECT_EQ(quantized_weight_bytes(n, 4096, QuantKind::fp4, false), single);
}

TEST(QuantSizes, Int8AndNone) {
  // 1 byte per weight plus an fp32 per output row: 16,777,216 + 4,096 * 4 = 16,793,600.
  const QuantizedWeightBytes q = quantized_weight_bytes(4096LL * 4096, 4096, QuantKind::int8, true);
  EXPECT_EQ(q.data, 16 * MiB);
  EXPECT_EQ(q.absmax, 16 * KiB);
  EXPECT_EQ(q.absmax2, 0);
  EXPECT_EQ(q.code_and_offset, 0);
  EXPECT_EQ(q.total, 16793600);
  // down_proj of llama2-7b: 4096 output rows of 11008.
  EXPECT_EQ(quantized_weight_bytes(4096LL * 11008, 4096, QuantKind::int8, false).absmax, 16384);
  EXPECT_EQ(quantized_weight_bytes(4096LL * 4096, 4096, QuantKind::none, true),
            QuantizedWeightBytes{});
}

TEST(QuantSizes, PartialBlocksRoundUp) {
  // 3 x 5 = 15 weights: 8 bytes of codes (the last low nibble pads), one block.
  const QuantizedWeightBytes small = quantized_weight_bytes(15, 3, QuantKind::nf4, true);
  EXPECT_EQ(small.data, 8);
  EXPECT_EQ(small.absmax, 1);
  EXPECT_EQ(small.absmax2, 4);
  // 65 weights are two blocks; 257 blocks (16,448 weights) are two second-level blocks.
  EXPECT_EQ(quantized_weight_bytes(65, 1, QuantKind::nf4, false).absmax, 8);
  EXPECT_EQ(quantized_weight_bytes(257 * 64, 1, QuantKind::nf4, true).absmax2, 8);
  EXPECT_EQ(quantized_weight_bytes(256 * 64, 1, QuantKind::nf4, true).absmax2, 4);
  EXPECT_EQ(quant_blocks(0, 64), 0);
  EXPECT_EQ(quant_blocks(std::numeric_limits<std::int64_t>::max(), 64),
            std::numeric_limits<std::int64_t>::max() / 64 + 1);
}

TEST(QuantSizes, Llama2SevenBillionBlockLinears) {
  // 32 layers x 7 linears: q, k, v, o [4096 x 4096] = 16,777,216 weights; gate, up [11008 x 4096]
  // and down [4096 x 11008] = 45,088,768 weights.
  struct Linear {
    std::int64_t rows, cols;
  };
  const Linear layer[] = {{4096, 4096},  {4096, 4096},  {4096, 4096}, {4096, 4096},
                          {11008, 4096}, {11008, 4096}, {4096, 11008}};
  auto total = [&](QuantKind kind, bool double_quant) {
    Bytes sum = 0;
    for (int l = 0; l < 32; ++l)
      for (const Linear& lin : layer)
        sum += quantized_weight_bytes(lin.rows * lin.cols, lin.rows, kind, double_quant).total;
    return sum;
  };
  // NF4: a square linear 9,437,248 (above); a 45,088,768-weight one 22,544,384 codes + 704,512
  // blocks * 4 = 2,818,048 absmax + 64 = 25,362,496. Per layer 4 * 9,437,248 + 3 * 25,362,496
  // = 113,836,480; 32 layers 3,642,767,360.
  EXPECT_EQ(total(QuantKind::nf4, false), 3642767360LL);
  // Double quant: 8,655,940 (above) and 22,544,384 + 704,512 + ceil(704,512 / 256) = 2,752 * 4
  // = 11,008 + 1,092 = 23,260,996. Per layer 4 * 8,655,940 + 3 * 23,260,996 = 104,406,748;
  // 32 layers 3,341,015,936 (the 6,476,005,376 weights at 4.127 bits).
  EXPECT_EQ(total(QuantKind::nf4, true), 3341015936LL);
  // int8: the 6,476,005,376 weights plus 4 bytes per output row: per layer 4 * 4,096 + 2 * 11,008
  // + 4,096 = 42,496 rows = 169,984 bytes, 32 layers 5,439,488.
  EXPECT_EQ(total(QuantKind::int8, false), 6476005376LL + 5439488LL);
}

TEST(QuantSizes, TensorsAreTheSeparateAllocations) {
  const std::int64_t n = 4096LL * 4096;
  const std::vector<QuantizedTensor> nested =
      quantized_weight_tensors(n, 4096, QuantKind::nf4, true);
  const std::vector<QuantizedTensor> want = {{"weight", 8 * MiB},     {"quant_map", 64},
                                             {"offset", 4},           {"absmax", 256 * KiB},
                                             {"nested_absmax", 4096}, {"nested_quant_map", 1024}};
  EXPECT_EQ(nested, want);
  const std::vector<QuantizedTensor> single =
      quantized_weight_tensors(n, 4096, QuantKind::fp4, false);
  const std::vector<QuantizedTensor> want_single = {
      {"weight", 8 * MiB}, {"absmax", 1 * MiB}, {"quant_map", 64}};
  EXPECT_EQ(single, want_single);
  const std::vector<QuantizedTensor> int8 =
      quantized_weight_tensors(n, 4096, QuantKind::int8, false);
  const std::vector<QuantizedTensor> want_int8 = {{"weight", 16 * MiB}, {"row_absmax", 16 * KiB}};
  EXPECT_EQ(int8, want_int8);
  EXPECT_TRUE(quantized_weight_tensors(n, 4096, QuantKind::none, false).empty());
}

TEST(QuantSizes, RejectsBadShapesAndOverflow) {
  EXPECT_THROW(quantized_weight_bytes(-1, 1, QuantKind::nf4, false), UsageError);
  EXPECT_THROW(quantized_weight_bytes(10, 3, QuantKind::int8, false), UsageError);
  EXPECT_THROW(quantized_weight_bytes(10, 0, QuantKind::int8, false), UsageError);
  const std::int64_t huge = std::numeric_limits<std::int64_t>::max();
  EXPECT_THROW(quantized_weight_bytes(huge, huge, QuantKind::int8, false), UsageError);
  EXPECT_THROW(optimizer8bit_state_bytes(-1), UsageError);
  EXPECT_THROW(optimizer8bit_state_bytes(huge / 2 + 1), UsageError);  // 2 bytes each overflows
}

TEST(QuantSizes, Optimizer8bitStateAndItsThreshold) {
  // 10,000 elements: m and v one byte each = 20,000; ceil(10,000 / 256) = 40 blocks, two fp32
  // absmax each = 320; 20,320 in all.
  const Optimizer8bitStateBytes s = optimizer8bit_state_bytes(10000);
  EXPECT_TRUE(s.eight_bit);
  EXPECT_EQ(s.moments, 20000);
  EXPECT_EQ(s.absmax, 320);
  EXPECT_EQ(s.total, 20320);
  EXPECT_FALSE(s.moments_paged);
  // min_8bit_size = 4096 is the first 8-bit size: 8,192 + 16 blocks * 8 = 8,320 bytes; one
  // element fewer keeps fp32 m and v: 4,095 * 8 = 32,760 bytes.
  EXPECT_EQ(optimizer8bit_state_bytes(4096).total, 8320);
  EXPECT_TRUE(optimizer_state_is_8bit(4096));
  const Optimizer8bitStateBytes below = optimizer8bit_state_bytes(4095);
  EXPECT_FALSE(below.eight_bit);
  EXPECT_FALSE(optimizer_state_is_8bit(4095));
  EXPECT_EQ(below.moments, 32760);
  EXPECT_EQ(below.absmax, 0);
  EXPECT_EQ(below.total, 32760);
  // A large tensor: 2 + 8/256 = 2.03125 bytes per parameter (facts.md: ~2.03).
  const std::int64_t big = std::int64_t{1} << 20;
  EXPECT_EQ(optimizer8bit_state_bytes(big).total, 2 * big + big / 256 * 8);
  // Paged: m and v page from 100,000 elements on (1e5 in get_state_buffer), not below.
  EXPECT_TRUE(optimizer8bit_state_bytes(100000, true).moments_paged);
  EXPECT_FALSE(optimizer8bit_state_bytes(99999, true).moments_paged);
  EXPECT_FALSE(optimizer8bit_state_bytes(100000, false).moments_paged);
  EXPECT_EQ(kOptimizer8bitMapBytes, 2048);
}

// ---- code tables -------------------------------------------------------------------------------

TEST(QuantTables, Nf4LevelsAreTheQloraQuantiles) {
  const std::vector<double> want = qlora_nf4_levels();
  ASSERT_EQ(want.size(), 16u);
  for (int c = 0; c < 16; ++c) EXPECT_NEAR(kquant::nf4_level(c), want[c], 1e-6) << "code " << c;
  EXPECT_EQ(kquant::nf4_level(0), -1.0f);
  EXPECT_EQ(kquant::nf4_level(7), 0.0f);
  EXPECT_EQ(kquant::nf4_level(15), 1.0f);
  for (int c = 0; c + 1 < 16; ++c) EXPECT_LT(kquant::nf4_level(c), kquant::nf4_level(c + 1));
}

TEST(QuantTables, Fp4LevelsAreTheLibrarysBitPatterns) {
  // get_4bit_type("fp4"): bits 000..111 -> 0, 0.0625, 8, 12, 4, 6, 2, 3, over 12; bit 3 the sign.
  const float magnitude[8] = {0.0f, 0.0625f, 8.0f, 12.0f, 4.0f, 6.0f, 2.0f, 3.0f};
  for (int c = 0; c < 16; ++c) {
    const float want = (c & 8 ? -1.0f : 1.0f) * magnitude[c & 7] / 12.0f;
    EXPECT_EQ(kquant::fp4_level(c), want) << "code " << c;
  }
  EXPECT_EQ(kquant::fp4_level(0b0011), 1.0f);
  EXPECT_EQ(kquant::fp4_level(0b1011), -1.0f);
}

TEST(QuantTables, EncodersPickTheNearestLevel) {
  for (QuantKind kind : {QuantKind::nf4, QuantKind::fp4}) {
    const std::array<float, 16> levels = levels_of(kind);
    // Every level encodes to itself (FP4's -0 to +0, the same value).
    for (int c = 0; c < 16; ++c)
      EXPECT_EQ(levels[kquant::encode_4bit(kind, levels[c])], levels[c]) << "code " << c;
    // A fine grid over [-1.1, 1.1]: the decoded value is as near as any level.
    for (int k = -11000; k <= 11000; ++k) {
      const float x = static_cast<float>(k) * 1e-4f;
      const float got = levels[kquant::encode_4bit(kind, x)];
      EXPECT_LE(std::fabs(static_cast<double>(x) - got), nearest_distance(levels, x) + 1e-9)
          << quant_kind_name(kind) << " x = " << x;
    }
  }
  // Ties: NF4 to the lower level, FP4 to the smaller magnitude.
  const float nf4_mid = 0.5f * (kquant::nf4_level(8) + kquant::nf4_level(9));
  EXPECT_EQ(kquant::nf4_encode(nf4_mid), 8);
  const float fp4_mid = 0.5f * (4.0f / 12.0f + 6.0f / 12.0f);
  EXPECT_EQ(kquant::fp4_encode(fp4_mid), 0b0100);
  EXPECT_EQ(kquant::fp4_encode(-fp4_mid), 0b1100);
}

TEST(QuantTables, DynamicMapsAreTheLibrarysValues) {
  for (int i = 0; i < 256; ++i) {
    EXPECT_EQ(kquant::dynamic_map_value(i, true), kSignedDynamicMap[i]) << "signed " << i;
    EXPECT_EQ(kquant::dynamic_map_value(i, false), kUnsignedDynamicMap[i]) << "unsigned " << i;
  }
}

TEST(QuantTables, DynamicMapProperties) {
  for (bool is_signed : {true, false}) {
    for (int i = 0; i + 1 < 256; ++i)  // sorted and distinct
      EXPECT_LT(kquant::dynamic_map_value(i, is_signed),
                kquant::dynamic_map_value(i + 1, is_signed))
          << (is_signed ? "signed " : "unsigned ") << i;
    EXPECT_EQ(kquant::dynamic_map_value(255, is_signed), 1.0f);
  }
  // Signed: 127 negative values, zero at 127, 127 positive ones and 1.0. The library appends 0 and
  // +1 only, so the most negative value is -0.99296875 (the mean of linspace(0.1, 1, 65)'s last
  // two points), not -1.
  EXPECT_EQ(kquant::dynamic_map_value(127, true), 0.0f);
  EXPECT_EQ(kquant::dynamic_map_value(0, true), -kquant::dynamic_map_value(254, true));
  EXPECT_NEAR(kquant::dynamic_map_value(0, true), -0.99296875, 1e-7);
  for (int i = 0; i < 127; ++i)
    EXPECT_EQ(kquant::dynamic_map_value(i, true), -kquant::dynamic_map_value(254 - i, true));
  // Unsigned: zero first, the smallest positive value 1e-6 * 0.325 (mean of 0.1 and 0.55).
  EXPECT_EQ(kquant::dynamic_map_value(0, false), 0.0f);
  EXPECT_NEAR(kquant::dynamic_map_value(1, false), 3.25e-7, 1e-12);
}

TEST(QuantTables, DynamicEncodeIsNearest) {
  for (bool is_signed : {true, false}) {
    const float* map = is_signed ? kSignedDynamicMap : kUnsignedDynamicMap;
    const std::vector<float> values(map, map + 256);
    for (int k = 0; k < 20000; ++k) {
      // Magnitudes spread over seven decades, as the map's are.
      const float u = kmath::uniform(is_signed ? 11 : 12, static_cast<std::uint64_t>(k));
      float x = std::pow(10.0f, -7.0f * u) * (k % 2 == 0 || !is_signed ? 1.0f : -1.0f);
      if (k % 97 == 0) x = map[k % 256];  // the values themselves
      const int code = kquant::dynamic_encode(map, x);
      EXPECT_LE(std::fabs(static_cast<double>(x) - map[code]), nearest_distance(values, x) + 1e-12)
          << "x = " << x;
    }
  }
}

// ---- 4-bit round trips -------------------------------------------------------------------------

TEST(QuantCpu, FourBitRoundTripErrorOnNormalWeights) {
  // 257 x 129 = 33,153 weights: an odd count and a partial last block.
  const std::int64_t rows = 257, cols = 129, n = rows * cols;
  const std::vector<float> w = normal_weights(n, 7);
  double mean_error[2] = {0.0, 0.0};
  for (QuantKind kind : {QuantKind::nf4, QuantKind::fp4}) {
    QuantizedWeight q(kind, rows, cols, false);
    cpu::quantize_weight(kind, false, q.buffers(), DType::f32, w.data(), rows, cols);
    std::vector<float> back(static_cast<std::size_t>(n));
    cpu::dequantize_weight(kind, false, DType::f32, back.data(), q.buffers(), rows, cols);
    const double half_gap = 0.5 * largest_gap(levels_of(kind));
    double error_sum = 0.0, absmax_sum = 0.0;
    for (std::int64_t b = 0; b < quant_blocks(n, kQuant4bitBlock); ++b) {
      const std::int64_t begin = b * kQuant4bitBlock, end = std::min(begin + kQuant4bitBlock, n);
      float absmax = 0.0f;
      for (std::int64_t i = begin; i < end; ++i) absmax = std::max(absmax, std::fabs(w[i]));
      ASSERT_EQ(q.absmax[b], absmax) << "block " << b;
      absmax_sum += absmax * static_cast<double>(end - begin);
      for (std::int64_t i = begin; i < end; ++i) {
        const double error = std::fabs(static_cast<double>(back[i]) - w[i]);
        // Within half the largest gap between levels (NF4: (1 - 0.6962) / 2 = 0.152, FP4:
        // (12 - 8) / 12 / 2 = 0.167) times the block's absmax, plus fp32 rounding.
        EXPECT_LE(error, half_gap * absmax * (1.0 + 1e-6)) << quant_kind_name(kind) << " " << i;
        error_sum += error;
      }
    }
    // Mean error against the mean absmax: measured 0.028 (NF4) and 0.038 (FP4); bounded by a
    // quarter of the mean level gap, (2 / 15) / 4 = 0.033, for NF4 (the expected error of values
    // spread evenly within each gap; NF4's equal-mass bins do no worse on normal data) and by
    // 0.045 for FP4, whose levels crowd near zero and leave gaps of 1/3 near the absmax.
    mean_error[kind == QuantKind::fp4] = error_sum / absmax_sum;
  }
  EXPECT_LT(mean_error[0], (2.0 / 15.0) / 4.0);
  EXPECT_LT(mean_error[1], 0.045);
  // QLoRA's point: NF4 represents normally distributed weights better than FP4.
  EXPECT_LT(mean_error[0], mean_error[1]);
}

TEST(QuantCpu, FourBitLevelsTimesAbsmaxRoundTripExactly) {
  const std::int64_t blocks = 40, n = blocks * kQuant4bitBlock;
  for (QuantKind kind : {QuantKind::nf4, QuantKind::fp4}) {
    std::vector<float> w(static_cast<std::size_t>(n));
    std::vector<float> absmax_of(static_cast<std::size_t>(blocks));
    for (std::int64_t b = 0; b < blocks; ++b) {
      absmax_of[b] = 0.001f + kmath::uniform(21, static_cast<std::uint64_t>(b));
      for (std::int64_t j = 0; j < kQuant4bitBlock; ++j) {
        // Element 0 of each block is +1 * absmax, which fixes the block's absmax.
        const int code = j == 0 ? (kind == QuantKind::nf4 ? 15 : 0b0011)
                                : static_cast<int>(kmath::hash64(22, b * 64 + j) % 16);
        w[b * kQuant4bitBlock + j] = kquant::level_4bit(kind, code) * absmax_of[b];
      }
    }
    std::vector<std::uint8_t> codes(static_cast<std::size_t>(n / 2));
    std::vector<float> absmax(static_cast<std::size_t>(blocks)), back(static_cast<std::size_t>(n));
    cpu::quantize_4bit(kind, codes.data(), absmax.data(), DType::f32, w.data(), n);
    cpu::dequantize_4bit(kind, DType::f32, back.data(), codes.data(), absmax.data(), n);
    EXPECT_EQ(absmax, absmax_of);
    EXPECT_EQ(back, w) << quant_kind_name(kind);
  }
}

TEST(QuantCpu, FourBitNibbleOrderPaddingAndZeroBlocks) {
  // Element 2j in the high nibble, 2j + 1 in the low one: [1, 0, -1, 0.5626] * 2 gives NF4 codes
  // 15, 7, 0, 13 -> bytes 0xF7, 0x0D; an odd count pads the last low nibble with the code of 0.
  const float w[5] = {2.0f, 0.0f, -2.0f, 0.5626170039176941f * 2.0f, 2.0f};
  std::uint8_t codes[3] = {0xAA, 0xAA, 0xAA};
  float absmax = 0.0f;
  cpu::quantize_4bit(QuantKind::nf4, codes, &absmax, DType::f32, w, 5);
  EXPECT_EQ(absmax, 2.0f);
  EXPECT_EQ(codes[0], 0xF7);
  EXPECT_EQ(codes[1], 0x0D);
  EXPECT_EQ(codes[2], 0xF7);
  cpu::quantize_4bit(QuantKind::fp4, codes, &absmax, DType::f32, w, 5);
  EXPECT_EQ(codes[0], 0x30);  // +1 is 0b0011, 0 is 0b0000
  EXPECT_EQ(codes[1], 0xB5);  // -1 is 0b1011; 0.5626 is nearest 6/12 = 0b0101
  EXPECT_EQ(codes[2], 0x30);
  // An all-zero block: absmax 0, every code the level 0, dequantised to 0.
  const float zeros[64] = {};
  std::uint8_t zero_codes[32];
  cpu::quantize_4bit(QuantKind::nf4, zero_codes, &absmax, DType::f32, zeros, 64);
  EXPECT_EQ(absmax, 0.0f);
  for (std::uint8_t c : zero_codes) EXPECT_EQ(c, 0x77);
  float back[64];
  cpu::dequantize_4bit(QuantKind::nf4, DType::f32, back, zero_codes, &absmax, 64);
  for (float v : back) EXPECT_EQ(v, 0.0f);
}

TEST(QuantCpu, FourBitStoresInEveryDtype) {
  // The weight read from and written to bf16 / fp16: the dequantised value is the fp32 one
  // rounded once to the dtype.
  const std::int64_t n = 1000;
  const std::vector<float> w = normal_weights(n, 31);
  std::vector<std::uint8_t> codes(static_cast<std::size_t>(n / 2));
  std::vector<float> absmax(static_cast<std::size_t>(quant_blocks(n, kQuant4bitBlock))),
      want(static_cast<std::size_t>(n));
  cpu::quantize_4bit(QuantKind::nf4, codes.data(), absmax.data(), DType::f32, w.data(), n);
  cpu::dequantize_4bit(QuantKind::nf4, DType::f32, want.data(), codes.data(), absmax.data(), n);
  for (DType dtype : {DType::bf16, DType::f16}) {
    std::vector<std::uint16_t> stored(static_cast<std::size_t>(n));
    cpu::dequantize_4bit(QuantKind::nf4, dtype, stored.data(), codes.data(), absmax.data(), n);
    for (std::int64_t i = 0; i < n; ++i)
      EXPECT_EQ(kmath::load(stored.data(), dtype, i), kmath::round_to(dtype, want[i]))
          << dtype_name(dtype) << " " << i;
  }
}

// ---- double quantisation -----------------------------------------------------------------------

TEST(QuantCpu, DoubleQuantisedAbsmax) {
  // 64 x 4160 = 266,240 weights = 4,160 blocks = 16.25 second-level blocks (a partial one).
  const std::int64_t rows = 64, cols = 4160, n = rows * cols;
  const std::int64_t blocks = quant_blocks(n, kQuant4bitBlock);
  const std::vector<float> w = normal_weights(n, 41);
  QuantizedWeight q(QuantKind::nf4, rows, cols, true);
  cpu::quantize_weight(QuantKind::nf4, true, q.buffers(), DType::f32, w.data(), rows, cols);
  // The offset is the mean of the fp32 absmax.
  double sum = 0.0;
  for (float a : q.absmax) sum += a;
  EXPECT_NEAR(q.offset[0], sum / static_cast<double>(blocks), 1e-6 * q.offset[0]);
  // Each second-level absmax is max |absmax - offset| over its 256 blocks; each rebuilt absmax is
  // within half the largest gap of the signed map (between 0.99297 and the 1.0 next to it on the
  // positive side, 0.0140625 between its top values: 0.0070313) times that.
  std::vector<float> rebuilt(static_cast<std::size_t>(blocks));
  cpu::dequantize_8bit(rebuilt.data(), q.qabsmax.data(), q.absmax2.data(), q.offset.data(), blocks,
                       kQuantNestedBlock, true);
  for (std::int64_t g = 0; g < quant_blocks(blocks, kQuantNestedBlock); ++g) {
    float want = 0.0f;
    for (std::int64_t b = g * 256; b < std::min((g + 1) * 256, blocks); ++b)
      want = std::max(want, std::fabs(q.absmax[b] - q.offset[0]));
    EXPECT_EQ(q.absmax2[g], want) << "group " << g;
  }
  for (std::int64_t b = 0; b < blocks; ++b)
    EXPECT_LE(std::fabs(rebuilt[b] - q.absmax[b]), 0.0070313 * q.absmax2[b / 256] + 1e-9)
        << "block " << b;
  // The fused dequantisation equals the library's two steps (absmax rebuilt, then 4-bit) exactly,
  // and stays within the 4-bit bound of the rebuilt absmax plus its own error.
  std::vector<float> fused(static_cast<std::size_t>(n)), two_step(static_cast<std::size_t>(n));
  cpu::dequantize_weight(QuantKind::nf4, true, DType::f32, fused.data(), q.buffers(), rows, cols);
  cpu::dequantize_4bit(QuantKind::nf4, DType::f32, two_step.data(), q.data.data(), rebuilt.data(),
                       n);
  EXPECT_EQ(fused, two_step);
  const double half_gap = 0.5 * largest_gap(levels_of(QuantKind::nf4));
  for (std::int64_t i = 0; i < n; ++i) {
    const std::int64_t b = i / kQuant4bitBlock;
    const double bound = half_gap * rebuilt[b] + std::fabs(rebuilt[b] - q.absmax[b]) + 1e-9;
    EXPECT_LE(std::fabs(static_cast<double>(fused[i]) - w[i]), bound) << i;
  }
}

// ---- int8 --------------------------------------------------------------------------------------

TEST(QuantCpu, Int8RowsRoundTrip) {
  const std::int64_t rows = 37, cols = 300;
  std::vector<float> w = normal_weights(rows * cols, 51);
  for (std::int64_t c = 0; c < cols; ++c) w[5 * cols + c] = 0.0f;     // an all-zero row
  for (std::int64_t c = 0; c < cols; ++c) w[6 * cols + c] *= 100.0f;  // a large row
  QuantizedWeight q(QuantKind::int8, rows, cols, false);
  cpu::quantize_weight(QuantKind::int8, false, q.buffers(), DType::f32, w.data(), rows, cols);
  std::vector<float> back(static_cast<std::size_t>(rows * cols));
  cpu::dequantize_weight(QuantKind::int8, false, DType::f32, back.data(), q.buffers(), rows, cols);
  const auto* codes = reinterpret_cast<const std::int8_t*>(q.data.data());
  for (std::int64_t r = 0; r < rows; ++r) {
    float absmax = 0.0f;
    for (std::int64_t c = 0; c < cols; ++c) absmax = std::max(absmax, std::fabs(w[r * cols + c]));
    ASSERT_EQ(q.absmax[r], absmax) << "row " << r;
    for (std::int64_t c = 0; c < cols; ++c) {
      const std::int64_t i = r * cols + c;
      // Half a step of absmax / 127, plus fp32 rounding; the absmax itself maps to +-127.
      EXPECT_LE(std::fabs(back[i] - w[i]), absmax / 254.0f * (1.0f + 1e-5f)) << i;
      EXPECT_LE(std::abs(static_cast<int>(codes[i])), 127);
      if (std::fabs(w[i]) == absmax && absmax > 0.0f) {
        EXPECT_EQ(std::abs(codes[i]), 127);
      }
    }
  }
  for (std::int64_t c = 0; c < cols; ++c) EXPECT_EQ(back[5 * cols + c], 0.0f);
}

// ---- 8-bit blockwise ---------------------------------------------------------------------------

TEST(QuantCpu, EightBitBlockwiseRoundTrip) {
  // Values over four decades within each block, as optimizer state has.
  const std::int64_t n = 1000, block = 256;
  std::vector<float> x(static_cast<std::size_t>(n));
  for (std::int64_t i = 0; i < n; ++i)
    x[i] = std::pow(10.0f, -4.0f * kmath::uniform(61, static_cast<std::uint64_t>(i))) *
           (i % 3 == 0 ? -1.0f : 1.0f);
  std::vector<std::uint8_t> codes(static_cast<std::size_t>(n));
  std::vector<float> absmax(static_cast<std::size_t>(quant_blocks(n, block))),
      back(static_cast<std::size_t>(n));
  cpu::quantize_8bit(codes.data(), absmax.data(), x.data(), nullptr, n, block, true);
  cpu::dequantize_8bit(back.data(), codes.data(), absmax.data(), nullptr, n, block, true);
  const std::vector<float> map(kSignedDynamicMap, kSignedDynamicMap + 256);
  for (std::int64_t i = 0; i < n; ++i) {
    const double a = absmax[i / block];
    // The nearest map value to x / absmax, times absmax (plus the rounding of that product).
    EXPECT_LE(std::fabs(back[i] - x[i]), nearest_distance(map, x[i] / a) * a + 1e-7 * a) << i;
    // Resolution: half a gap of the map's top group (64 values over [0.1, 1]: 0.9 / 64 / 2) above a
    // tenth of the absmax, of the group below (32 values over [0.01, 0.1]) under it: 7% and 14%
    // relative at the bottom of each decade.
    if (std::fabs(x[i]) >= 0.1 * a) {
      EXPECT_LE(std::fabs(back[i] - x[i]), 0.9 / 64 / 2 * a * (1.0 + 1e-4)) << i;
    } else if (std::fabs(x[i]) >= 0.01 * a) {
      EXPECT_LE(std::fabs(back[i] - x[i]), 0.09 / 32 / 2 * a * (1.0 + 1e-4)) << i;
    }
  }
}

// ---- the lane split of the GPU kernels
// -------------------------------------------------------------

TEST(QuantCpu, LaneSplitGivesTheSameCodes) {
  // The CUDA kernels run a block's bytes over 32 lanes (4-bit) or 256 threads (8-bit); the result
  // is the CPU's one lane, byte for byte.
  const std::int64_t n = 5 * kQuant4bitBlock + 7;
  const std::vector<float> w = normal_weights(n, 71);
  const kquant::StorageLoad load{w.data(), DType::f32};
  std::vector<std::uint8_t> one(static_cast<std::size_t>((n + 1) / 2)), split(one.size(), 0xEE);
  std::vector<float> absmax(static_cast<std::size_t>(quant_blocks(n, kQuant4bitBlock)));
  cpu::quantize_4bit(QuantKind::fp4, one.data(), absmax.data(), DType::f32, w.data(), n);
  for (std::int64_t b = 0; b < quant_blocks(n, kQuant4bitBlock); ++b) {
    const std::int64_t begin = b * kQuant4bitBlock, end = std::min(begin + kQuant4bitBlock, n);
    float block_absmax = 0.0f;
    for (int lane = 0; lane < 32; ++lane)
      block_absmax = std::max(block_absmax, kquant::absmax_part(load, begin, end, lane, 32));
    EXPECT_EQ(block_absmax, absmax[b]);
    for (int lane = 31; lane >= 0; --lane)
      kquant::quantize_4bit_bytes(QuantKind::fp4, split.data(), load, begin, end, lane, 32,
                                  block_absmax);
  }
  EXPECT_EQ(split, one);
}

// ---- 8-bit AdamW -------------------------------------------------------------------------------

struct Adam8bit {
  std::vector<std::uint8_t> m_codes, v_codes;
  std::vector<float> absmax_m, absmax_v;
  explicit Adam8bit(std::int64_t n)
      : m_codes(static_cast<std::size_t>(n)),
        v_codes(static_cast<std::size_t>(n)),
        absmax_m(static_cast<std::size_t>(quant_blocks(n, kOptimizer8bitBlock))),
        absmax_v(absmax_m.size()) {}
  kquant::AdamW8bitState state() {
    return {m_codes.data(), v_codes.data(), absmax_m.data(), absmax_v.data(), nullptr, nullptr};
  }
};

// A gradient with a steady part (so that m builds up) and noise, its scale varying by element.
std::vector<float> gradient(std::int64_t n, int step) {
  std::vector<float> g(static_cast<std::size_t>(n));
  for (std::int64_t i = 0; i < n; ++i)
    g[i] = 0.01f * static_cast<float>(1 + i % 7) *
           (kmath::standard_normal(2, i) + 0.5f * kmath::standard_normal(100 + step, i));
  return g;
}

TEST(Adam8bitCpu, FollowsFp32AdamWOverTenSteps) {
  const std::int64_t n = 10000;  // 8-bit: 39 full blocks and one of 16
  ASSERT_TRUE(optimizer_state_is_8bit(n));
  const std::vector<float> w0 = normal_weights(n, 1);
  std::vector<float> w8 = w0, w32 = w0;
  std::vector<float> m(static_cast<std::size_t>(n), 0.0f), v(m.size(), 0.0f);
  Adam8bit state(n);  // zero codes and zero absmax: every moment starts at 0
  kmath::AdamParams p;
  p.lr = 1e-3f;
  p.weight_decay = 0.01f;
  for (int step = 1; step <= 10; ++step) {
    p.step = step;
    const std::vector<float> g = gradient(n, step);
    cpu::adamw_step(w32.data(), g.data(), m.data(), v.data(), n, p);
    cpu::adamw_8bit_step(w8.data(), g.data(), state.state(), n, p);
  }
  // Quantisation tolerance: the dynamic map resolves m and v to half a gap, 0.7% of the block's
  // absmax in its top decade and a few % relative a decade or two below; Adam's step is about lr
  // whatever the scale, so ten steps drift each weight by well under 2 lr (measured 0.8 lr) and
  // all of them by under 5% of how far they moved (measured 1.5%).
  double drift2 = 0.0, moved2 = 0.0, worst = 0.0;
  for (std::int64_t i = 0; i < n; ++i) {
    const double d = static_cast<double>(w8[i]) - w32[i];
    worst = std::max(worst, std::fabs(d));
    drift2 += d * d;
    moved2 += (static_cast<double>(w32[i]) - w0[i]) * (static_cast<double>(w32[i]) - w0[i]);
  }
  EXPECT_LT(worst, 2.0 * p.lr);
  EXPECT_LT(std::sqrt(drift2 / moved2), 0.05);
  EXPECT_GT(std::sqrt(moved2 / static_cast<double>(n)), 2.0 * p.lr);  // the weights did move
  // The moments themselves: within 4% of the block absmax (errors of successive steps add, each
  // damped by beta: measured 3.5% for m, 1.5% for v).
  for (std::int64_t i = 0; i < n; ++i) {
    const std::int64_t b = i / kOptimizer8bitBlock;
    const float m8 = kquant::dynamic_map_value(state.m_codes[i], true) * state.absmax_m[b];
    const float v8 = kquant::dynamic_map_value(state.v_codes[i], false) * state.absmax_v[b];
    EXPECT_LE(std::fabs(m8 - m[i]), 0.04 * state.absmax_m[b]) << i;
    EXPECT_LE(std::fabs(v8 - v[i]), 0.04 * state.absmax_v[b]) << i;
  }
}

TEST(Adam8bitCpu, OneStepRequantisesToTheNearestCode) {
  // From a random 8-bit state: the weights are fp32 AdamW's (kmath::adamw_update on the
  // dequantised moments) to the bit; the new absmax is the block's max |m|, max v; every code is
  // the nearest map value, except a negative m nearest to 0, which keeps its sign.
  const std::int64_t n = 16 * kOptimizer8bitBlock + 100;  // 8-bit: at least min_8bit_size
  ASSERT_TRUE(optimizer_state_is_8bit(n));
  Adam8bit state(n);
  for (std::int64_t i = 0; i < n; ++i) {
    state.m_codes[i] = static_cast<std::uint8_t>(kmath::hash64(81, i) % 256);
    state.v_codes[i] = static_cast<std::uint8_t>(kmath::hash64(82, i) % 256);
  }
  for (std::size_t b = 0; b < state.absmax_m.size(); ++b) {
    state.absmax_m[b] = 0.01f * (1.0f + kmath::uniform(83, b));
    state.absmax_v[b] = 1e-4f * (1.0f + kmath::uniform(84, b));
  }
  state.m_codes[5] = 126;  // the negative value next to 0, about -5.5e-7 of the absmax
  std::vector<float> w = normal_weights(n, 85), g = gradient(n, 1);
  // Element 5's gradient brings m to -1e-12, far nearer 0 than any negative map value times the
  // block's new absmax (>= 0.01): the sign rule must keep it at code 126.
  const float m5 = kSignedDynamicMap[126] * state.absmax_m[0];
  g[5] = (-1e-12f - 0.9f * m5) / 0.1f;
  kmath::AdamParams p;
  p.lr = 1e-3f;
  p.weight_decay = 0.1f;
  p.step = 4;
  // The reference, element by element in fp32.
  std::vector<float> w_ref = w, m_ref(static_cast<std::size_t>(n)), v_ref(m_ref.size());
  for (std::int64_t i = 0; i < n; ++i) {
    const std::int64_t b = i / kOptimizer8bitBlock;
    m_ref[i] = kSignedDynamicMap[state.m_codes[i]] * state.absmax_m[b];
    v_ref[i] = kUnsignedDynamicMap[state.v_codes[i]] * state.absmax_v[b];
    kmath::adamw_update(&w_ref[i], g[i], &m_ref[i], &v_ref[i], p);
  }
  ASSERT_LT(m_ref[5], 0.0f);
  ASSERT_LT(-m_ref[5], 1e-10f);
  cpu::adamw_8bit_step(w.data(), g.data(), state.state(), n, p);
  EXPECT_EQ(w, w_ref);
  EXPECT_EQ(state.m_codes[5], 126);
  const std::vector<float> signed_map(kSignedDynamicMap, kSignedDynamicMap + 256);
  const std::vector<float> unsigned_map(kUnsignedDynamicMap, kUnsignedDynamicMap + 256);
  for (std::int64_t b = 0; b < quant_blocks(n, kOptimizer8bitBlock); ++b) {
    float max_m = 0.0f, max_v = 0.0f;
    for (std::int64_t i = b * 256; i < std::min((b + 1) * 256, n); ++i) {
      max_m = std::max(max_m, std::fabs(m_ref[i]));
      max_v = std::max(max_v, v_ref[i]);
    }
    ASSERT_EQ(state.absmax_m[b], max_m);
    ASSERT_EQ(state.absmax_v[b], max_v);
    for (std::int64_t i = b * 256; i < std::min((b + 1) * 256, n); ++i) {
      const double m_scaled = m_ref[i] / static_cast<double>(max_m);
      const double v_scaled = v_ref[i] / static_cast<double>(max_v);
      const float m_value = kSignedDynamicMap[state.m_codes[i]];
      if (m_ref[i] < 0.0f && nearest_distance(std::vector<float>{0.0f}, m_scaled) <=
                                 nearest_distance(signed_map, m_scaled)) {
        EXPECT_EQ(state.m_codes[i], 126) << i;  // -1.8e-6: the negative value next to 0
      } else {
        EXPECT_LE(std::fabs(m_scaled - m_value), nearest_distance(signed_map, m_scaled) + 1e-7)
            << i;
      }
      EXPECT_LE(std::fabs(v_scaled - kUnsignedDynamicMap[state.v_codes[i]]),
                nearest_distance(unsigned_map, v_scaled) + 1e-7)
          << i;
    }
  }
}

TEST(Adam8bitCpu, BelowMin8bitSizeIsFp32AdamW) {
  // 1,000 elements keep 32-bit state (min_8bit_size 4,096): adamw_8bit_step runs plain fp32 AdamW
  // on state.m / state.v, and never touches 8-bit buffers.
  const std::int64_t n = 1000;
  ASSERT_FALSE(optimizer_state_is_8bit(n));
  std::vector<float> w8 = normal_weights(n, 91), w32 = w8;
  std::vector<float> m8(static_cast<std::size_t>(n), 0.0f), v8(m8), m32(m8), v32(m8);
  std::vector<std::uint8_t> untouched(static_cast<std::size_t>(n), 0x5A);
  std::vector<float> untouched_absmax(4, 123.0f);
  const kquant::AdamW8bitState state{
      untouched.data(),        untouched.data(), untouched_absmax.data(),
      untouched_absmax.data(), m8.data(),        v8.data()};
  kmath::AdamParams p;
  p.weight_decay = 0.01f;
  for (int step = 1; step <= 10; ++step) {
    p.step = step;
    const std::vector<float> g = gradient(n, step);
    cpu::adamw_8bit_step(w8.data(), g.data(), state, n, p);
    cpu::adamw_step(w32.data(), g.data(), m32.data(), v32.data(), n, p);
  }
  EXPECT_EQ(w8, w32);
  EXPECT_EQ(m8, m32);
  EXPECT_EQ(v8, v32);
  for (std::uint8_t c : untouched) EXPECT_EQ(c, 0x5A);
  for (float a : untouched_absmax) EXPECT_EQ(a, 123.0f);
}

}  // namespace
}  // namespace vrambench
