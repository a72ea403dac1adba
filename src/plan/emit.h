// What `vrambench plan` prints: Markdown for people, a Hugging Face snippet (TrainingArguments,
// BitsAndBytesConfig, LoraConfig), Axolotl YAML keys, or JSON with everything (raw integers,
// units in the names).
#pragma once

#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <vector>

#include "core/enum_names.h"
#include "plan/plan.h"

namespace vrambench {

enum class PlanEmit { text, hf, axolotl, json, accelerate, deepspeed };
template <>
EnumNames<PlanEmit> enum_names<PlanEmit>();
// "text", "hf", "axolotl", "json", "accelerate", "deepspeed".
std::string_view to_string(PlanEmit e);
// The form named `text`; throws UsageError naming --emit and the allowed values.
PlanEmit parse_plan_emit(std::string_view text);

// The recipe in a few words: "llama2-7b, seq 2048, bf16, flash attention, recompute full,
// paged-adamw-8bit, qlora (nf4 + double quant, r16, all-linear)".
std::string describe_recipe(const RunConfig& cfg);

// One plan: the settings, the budget table and, when there are any, the ranked alternatives, then
// a one-line summary.
std::string plan_markdown(const Plan& plan);
// "plan: micro-batch 4 x grad-accum 8 = 32 at seq 2048 on DEVICE: peak 18.20 GiB of 22.99 GiB
// planned (1.00 GiB margin)", or why nothing fits.
std::string plan_summary_line(const Plan& plan);
// Python that builds the trainer's settings (compiles with py_compile; needs transformers, peft
// and bitsandbytes to run).
std::string plan_hf_snippet(const Plan& plan);
// The matching Axolotl config keys.
std::string plan_axolotl_yaml(const Plan& plan);
nlohmann::json plan_json(const Plan& plan);
// An accelerate config file (`accelerate launch --config_file`, accelerate 1.15's keys) for the
// plan's --gpus and --strategy: FSDP (fsdp_version 2, each decoder layer wrapped; hsdp through
// parallelism_config), DeepSpeed (zero_stage, offload devices), MULTI_GPU for ddp, NO for one GPU.
std::string plan_accelerate_yaml(const Plan& plan);
// A DeepSpeed config (TrainingArguments(deepspeed=...), or accelerate's deepspeed_config_file) for
// a zero1/zero2/zero3 plan, with the ZeRO buffer sizes the plan modelled written out.
nlohmann::ordered_json plan_deepspeed_json(const Plan& plan);
// Throws UsageError unless cfg's strategy is ZeRO's (what --emit deepspeed needs).
void require_zero_strategy(const RunConfig& cfg);

// Several plans (a sweep): one row per configuration keyed by the varying fields, and a summary.
std::string plans_markdown(const std::vector<Plan>& plans, const std::vector<std::string>& varying);
nlohmann::json plans_json(const std::vector<Plan>& plans, const std::vector<std::string>& varying);

}  // namespace vrambench
