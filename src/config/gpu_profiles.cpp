// GPU profiles: totals from published figures, SMs from the spec sheets.
#include "config/gpu_profiles.h"

#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <cctype>
#include <string>

#include "core/error.h"

namespace vrambench {
namespace {

constexpr Bytes mib(std::int64_t n) {
  return n * MiB;
}

// SMs: the spec sheets' (NVIDIA's data sheets and whitepapers; the A10G has 80, the A10 72).
// Totals: what `nvidia-smi` prints after the slash of Memory-Usage (driver 525 and later; older
// drivers print less for the same card), from public outputs (shared/reference/facts.md lists the
// first fifteen):
//   rtx5090      32607   github.com/noonghunna/club-3090/issues/617
//   a10g         23028   github.com/NVIDIA/DCGM/issues/232 (the A10 prints the same)
//   l4           23034   github.com/speaches-ai/speaches/pull/438
//   v100-16gb    16384   Tesla V100-SXM2-16GB on current drivers (16160 on driver 440)
//   v100-32gb    32768   github.com/Wan-Video/Wan2.1/issues/5 (driver 525)
//   h100-pcie    81559   "NVIDIA H100 PCIe ... 0MiB / 81559MiB", as the SXM card
//   b200         183359  github.com/NVIDIA/TensorRT-LLM/issues/10278
constexpr std::array<GpuProfile, 22> kProfiles{{
    {"h100-80gb", "H100 SXM 80GB", mib(81559), 90, 132},
    {"h100-pcie", "H100 PCIe 80GB", mib(81559), 90, 114},
    {"h200", "H200 141GB", mib(143771), 90, 132},
    {"b200", "B200 180GB", mib(183359), 100, 148},
    {"a100-80gb", "A100 80GB", mib(81920), 80, 108},
    {"a100-40gb", "A100 40GB", mib(40960), 80, 108},
    {"l40s", "L40S 48GB", mib(46068), 89, 142},
    {"rtx6000-ada", "RTX 6000 Ada 48GB", mib(49140), 89, 142},
    {"a6000", "RTX A6000 48GB", mib(49140), 86, 84},
    {"a10g", "A10G 24GB", mib(23028), 86, 80},
    {"l4", "L4 24GB", mib(23034), 89, 58},
    {"v100-32gb", "Tesla V100 32GB", mib(32768), 70, 80},
    {"v100-16gb", "Tesla V100 16GB", mib(16384), 70, 80},
    {"rtx5090", "GeForce RTX 5090 32GB", mib(32607), 120, 170},
    {"rtx4090", "GeForce RTX 4090 24GB", mib(24564), 89, 128},
    {"rtx3090", "GeForce RTX 3090 24GB", mib(24576), 86, 82},
    {"rtx4080", "GeForce RTX 4080 16GB", mib(16376), 89, 76},
    {"rtx4060ti-16gb", "GeForce RTX 4060 Ti 16GB", mib(16380), 89, 34},
    {"t4", "Tesla T4 16GB", mib(15360), 75, 40},
    {"rtx3060", "GeForce RTX 3060 12GB", mib(12288), 86, 28},
    {"rtx4060", "GeForce RTX 4060 8GB", mib(8188), 89, 24},
    {"rtx4050-laptop", "GeForce RTX 4050 Laptop 6GB", mib(6141), 89, 20},
}};

std::string joined_names() {
  std::string out;
  for (const GpuProfile& p : kProfiles) {
    if (!out.empty()) out += ", ";
    out += p.name;
  }
  return out;
}

}  // namespace

std::span<const GpuProfile> gpu_profiles() {
  return kProfiles;
}

const GpuProfile& find_gpu_profile(std::string_view name) {
  if (name.starts_with("sim:")) name.remove_prefix(4);
  // Case-insensitively: "RTX4090" is rtx4090.
  auto same = [](std::string_view a, std::string_view b) {
    return std::ranges::equal(a, b, [](char x, char y) {
      return std::tolower(static_cast<unsigned char>(x)) ==
             std::tolower(static_cast<unsigned char>(y));
    });
  };
  for (const GpuProfile& p : kProfiles)
    if (same(p.name, name)) return p;
  throw UsageError(
      fmt::format("unknown GPU profile '{}': known profiles are {}", name, joined_names()));
}

}  // namespace vrambench
