// The CUDA side of the CLI's GPU bridge (cli/gpu.h) in builds with the CUDA device: whether there
// is a GPU, the `devices` table and the `selftest` command.
#include <fmt/format.h>

#include <cstdio>
#include <exception>
#include <nlohmann/json.hpp>
#include <optional>

#include "cli/gpu.h"
#include "core/error.h"
#include "cuda/check.h"
#include "device/cuda_device.h"
#include "search/isolate.h"

namespace vrambench {

GpuPresence probe_gpu() {
  // Asked in a child: a CUDA context in this process would be unusable by the children it forks.
  static const GpuPresence presence = [] {
    GpuPresence p;
    std::string why;
    const std::optional<std::string> answer = run_in_child(
        [] {
          std::string reason;
          const bool available = cuda_available(&reason);
          return nlohmann::json{{"available", available}, {"why", reason}}.dump();
        },
        &why);
    if (!answer) {
      p.why = "the GPU probe " + why;
      return p;
    }
    const nlohmann::json j = nlohmann::json::parse(*answer);
    p.available = j.at("available").get<bool>();
    p.why = j.at("why").get<std::string>();
    return p;
  }();
  return presence;
}

DeviceSpec resolve_gpu_device(const RunConfig& cfg) {
  std::string why;
  const std::optional<std::string> answer = run_in_child(
      [&] {
        const DeviceSpec d = resolve_cuda_device(cfg);
        return nlohmann::json{{"label", d.label},
                              {"total", d.total},
                              {"fixed_overhead", d.fixed_overhead},
                              {"gemm_workspace", d.gemm_workspace}}
            .dump();
      },
      &why);
  if (!answer) throw UsageError(fmt::format("--device cuda: {}", why));
  const nlohmann::json j = nlohmann::json::parse(*answer);
  DeviceSpec d;
  d.kind = DeviceKind::cuda;
  d.label = j.at("label").get<std::string>();
  d.total = j.at("total").get<Bytes>();
  d.fixed_overhead = j.at("fixed_overhead").get<Bytes>();
  d.gemm_workspace = j.at("gemm_workspace").get<Bytes>();
  d.trial_steps = 2;  // the second step is the steady state
  d.warm_up = true;   // modules load and cuDNN plans build on first use
  return d;
}

SourceFactory gpu_sources(bool async) {
  if (async) return [](Bytes capacity) { return make_cuda_async_source(capacity); };
  return [](Bytes capacity) { return make_cuda_source(capacity); };
}

ExecutorFactory gpu_executors(const std::string& flash_impl) {
  const FlashImpl flash = parse_flash_impl(flash_impl);
  return [flash] { return make_cuda_executor(1234, flash); };
}

Table gpu_table() {
  Table t;
  t.columns = {{"device", "device", CellKind::text},
               {"name", "name", CellKind::text},
               {"compute_capability", "cc", CellKind::text},
               {"total_bytes", "total", CellKind::bytes},
               {"free_bytes", "free", CellKind::bytes},
               {"driver", "driver", CellKind::integer},
               {"cuda_runtime", "CUDA runtime", CellKind::text},
               {"cublaslt", "cuBLASLt", CellKind::text},
               {"cudnn", "cuDNN", CellKind::text}};
  std::string why;
  if (!cuda_available(&why)) return t;
  int count = 0;
  VB_CUDA_CHECK(cudaGetDeviceCount(&count));
  for (int i = 0; i < count; ++i) {
    const CudaDeviceInfo d = query_cuda_device(i);
    t.add_row({Cell::of_text(fmt::format("cuda:{}", i)), Cell::of_text(d.name),
               Cell::of_text(fmt::format("{}.{}", d.cc_major, d.cc_minor)),
               Cell::of_bytes(d.total_memory), Cell::of_bytes(d.free_memory),
               Cell::of_int(d.driver_version), Cell::of_text(d.libraries.runtime_text()),
               Cell::of_text(d.libraries.cublaslt_text()),
               Cell::of_text(d.libraries.cudnn_text())});
  }
  return t;
}

int run_selftest() {
  std::vector<SelftestRow> rows;
  try {
    rows = run_cuda_selftest();
  } catch (const NeedsGpu& e) {
    std::fprintf(stderr, "vrambench: selftest %s\n", e.what());
    return 1;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "vrambench: selftest failed: %s\n", e.what());
    return 1;
  }
  Table t;
  t.columns = {{"config", "config", CellKind::text},
               {"op", "op", CellKind::text},
               {"dtype", "dtype", CellKind::text},
               {"ops", "ops", CellKind::integer},
               {"max_abs_error", "max abs error", CellKind::text},
               {"worst_ratio", "x tolerance", CellKind::text},
               {"passed", "passed", CellKind::flag},
               {"tolerance", "tolerance", CellKind::text}};
  bool all = true;
  for (const SelftestRow& r : rows) {
    all = all && r.passed;
    t.add_row({Cell::of_text(r.config), Cell::of_text(r.op),
               Cell::of_text(std::string(dtype_name(r.dtype))), Cell::of_int(r.ops),
               Cell::of_text(fmt::format("{:.3g}", r.max_abs_error)),
               Cell::of_text(fmt::format("{:.3g}", r.worst_ratio)), Cell::of_flag(r.passed),
               Cell::of_text(r.note)});
  }
  std::printf("%s\n", to_markdown(t).c_str());
  std::printf("selftest: %s\n", all ? "every op matches the CPU reference" : "FAILED");
  return all ? 0 : 1;
}

}  // namespace vrambench
