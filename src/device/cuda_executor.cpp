// The cuda device's Executor: runs each op of a Program through its launcher in the op table
// (kernels/cuda/op_table.h) on one stream. Tensors arrive as device pointers bound by the trial
// runner; GEMM workspace tensors are found by role. Initial contents follow the cpu executor's
// rules (same seed, same values), filled on the device.
#include <cuda_runtime.h>
#include <fmt/format.h>

#include <string>
#include <vector>

#include "core/error.h"
#include "cuda/check.h"
#include "cuda/init_fill.h"
#include "cuda/op_table.h"
#include "cuda/quant.h"
#include "device/cuda_device.h"
#include "device/init_rule.h"
#include "op/operands.h"

namespace vrambench {
namespace {

using namespace vrambench::cuda;

class CudaExecutor final : public Executor {
 public:
  CudaExecutor(std::uint64_t seed, FlashImpl flash)
      : seed_(seed), flash_impl_(flash), context_([flash](DType storage) {
          return resolve_flash_impl(flash, storage) == FlashImpl::cudnn;
        }) {}

  std::string_view name() const override { return "cuda"; }

  std::string_view attention_impl(const RunConfig& cfg) const override {
    if (cfg.attention == Attention::eager) return "eager";
    return resolve_flash_impl(flash_impl_, activation_dtype(cfg.dtype)) == FlashImpl::cudnn
               ? "cudnn-sdpa"
               : "kernel";
  }

  void initialize(const Program& program, int tensor_id, void* data) override {
    const Tensor& t = program.tensor(tensor_id);
    try {
      if (const auto part = quantized_part(program, tensor_id)) {
        initialize_quantized(program, tensor_id, *part, data);
        return;
      }
      launch_init(data, t.dtype, t.elements(), init_rule(program, tensor_id, seed_),
                  context_.stream());
    } catch (const CudaOutOfMemory& e) {
      throw DeviceOutOfMemory(fmt::format("initialising '{}': {}", t.name, e.what()));
    }
  }

  void execute(const Program& program, std::size_t op_index,
               const std::vector<void*>& data) override {
    const Operands a = decode_operands(program, op_index, data);
    // A launcher reads every operand as the op's dtype but the ones the signature frees from it
    // (the hf step's mixed dtypes), which it takes in their own: one stored otherwise would be
    // misread.
    if (const Operand* o = operand_of_another_dtype(a))
      a.fail(
          fmt::format("'{}' is {} where the op computes in {}, and its kernel takes no other "
                      "dtype there; --no-execute measures the step's allocations without "
                      "running kernels",
                      o->tensor->name, dtype_name(o->tensor->dtype), dtype_name(a.dtype())));
    try {
      cuda_run(a.op.kind)(a, context_);
    } catch (const CudaOutOfMemory& e) {
      throw DeviceOutOfMemory(fmt::format("op '{}': {}", a.op.name, e.what()));
    }
  }

  void synchronize() override { VB_CUDA_CHECK(cudaStreamSynchronize(context_.stream())); }

 private:
  void initialize_quantized(const Program& program, int tensor_id, const QuantizedPart& part,
                            void* data);

  std::uint64_t seed_;
  FlashImpl flash_impl_;
  CudaContext context_;  // the stream, the GEMM runner, cuDNN and the optimizer steps
};

// A part of a quantised frozen weight: the module's weight drawn on the device by the init rule
// (the dense linear's rows), quantised by the launchers into scratch, the part copied out. The
// scratch is freed before the step starts; its values are bit for bit the cpu executor's.
void CudaExecutor::initialize_quantized(const Program& program, int tensor_id,
                                        const QuantizedPart& part, void* data) {
  const Tensor& t = program.tensor(tensor_id);
  cudaStream_t st = context_.stream();
  using Kind = QuantizedPart::Kind;
  if (part.kind == Kind::quant_map || part.kind == Kind::nested_quant_map) {
    std::vector<float> table(static_cast<std::size_t>(t.elements()));
    fill_code_table(part, table.data(), t.elements());
    VB_CUDA_CHECK(cudaMemcpyAsync(data, table.data(), table.size() * sizeof(float),
                                  cudaMemcpyHostToDevice, st));
    VB_CUDA_CHECK(cudaStreamSynchronize(st));
    return;
  }
  const std::int64_t n = part.rows * part.cols;
  const QuantizedWeightBytes bytes =
      quantized_weight_bytes(n, part.rows, part.quant, part.double_quant);
  const std::int64_t scales =
      part.quant == QuantKind::int8 ? part.rows : quant_blocks(n, kQuant4bitBlock);
  const Bytes absmax2_bytes =
      part.double_quant ? quant_blocks(scales, kQuantNestedBlock) * Bytes{4} : 0;
  // One scratch allocation: weight | codes | fp32 absmax | qabsmax | absmax2 | offset, each
  // 256-byte aligned.
  auto up = [](Bytes b) { return (b + 255) / 256 * 256; };
  const Bytes w_bytes = up(n * dtype_size(part.dtype)), codes_bytes = up(bytes.data),
              absmax_bytes = up(scales * Bytes{4}), q_bytes = up(part.double_quant ? scales : 0),
              a2_bytes = up(absmax2_bytes);
  const Bytes total = w_bytes + codes_bytes + absmax_bytes + q_bytes + a2_bytes + 256;
  void* scratch = nullptr;
  if (cudaMalloc(&scratch, total) != cudaSuccess) {
    (void)cudaGetLastError();
    throw DeviceOutOfMemory(fmt::format(
        "initialising '{}': no room for {} bytes of quantisation scratch", t.name, total));
  }
  char* base = static_cast<char*>(scratch);
  void* w = base;
  kquant::QuantizedWeightBuffers out;
  out.data = reinterpret_cast<std::uint8_t*>(base + w_bytes);
  out.absmax = reinterpret_cast<float*>(base + w_bytes + codes_bytes);
  if (part.double_quant) {
    out.qabsmax = reinterpret_cast<std::uint8_t*>(base + w_bytes + codes_bytes + absmax_bytes);
    out.absmax2 = reinterpret_cast<float*>(base + w_bytes + codes_bytes + absmax_bytes + q_bytes);
    out.offset =
        reinterpret_cast<float*>(base + w_bytes + codes_bytes + absmax_bytes + q_bytes + a2_bytes);
  }
  try {
    const kmath::InitRule rule = weight_init_rule(seed_, part.weight);
    // Rows [row_offset, +rows) of the dense weight: element i of the module is element
    // row_offset * cols + i of the weight's stream.
    launch_init_offset(w, part.dtype, n, rule, part.row_offset * part.cols, st);
    launch_quantize_weight(part.quant, part.double_quant, part.dtype, out, w, part.rows, part.cols,
                           st);
    const void* src = nullptr;
    Bytes size = 0;
    switch (part.kind) {
      case Kind::codes:
        src = out.data, size = bytes.data;
        break;
      case Kind::absmax:
        src = part.double_quant ? static_cast<const void*>(out.qabsmax) : out.absmax;
        size = part.double_quant ? scales : scales * Bytes{4};
        break;
      case Kind::absmax2:
        src = out.absmax2, size = absmax2_bytes;
        break;
      case Kind::offset:
        src = out.offset, size = 4;
        break;
      default:
        break;
    }
    if (src == nullptr || size != t.bytes)
      throw InternalError(
          fmt::format("quantised part '{}': {} bytes, the program has {}", t.name, size, t.bytes));
    VB_CUDA_CHECK(
        cudaMemcpyAsync(data, src, static_cast<std::size_t>(size), cudaMemcpyDeviceToDevice, st));
    VB_CUDA_CHECK(cudaStreamSynchronize(st));
  } catch (...) {
    (void)cudaStreamSynchronize(st);
    (void)cudaFree(scratch);
    throw;
  }
  VB_CUDA_CHECK(cudaFree(scratch));
}

}  // namespace

std::unique_ptr<Executor> make_cuda_executor(std::uint64_t seed, FlashImpl flash) {
  std::string why;
  if (!cuda_available(&why)) throw NeedsGpu(why);
  return std::make_unique<CudaExecutor>(seed, flash);
}

}  // namespace vrambench
