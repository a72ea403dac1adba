// The printers of a plan: Markdown, Hugging Face Python, Axolotl YAML and JSON.
#include "plan/emit.h"

#include <fmt/format.h>

#include <algorithm>
#include <array>

#include "config/fields.h"
#include "core/error.h"
#include "program/shard.h"
#include "report/result_tables.h"
#include "report/table.h"

namespace vrambench {
namespace {

std::string share(Bytes bytes, Bytes capacity) {
  if (capacity <= 0) return "-";
  return fmt::format("{:5.1f}%",
                     100.0 * static_cast<double>(bytes) / static_cast<double>(capacity));
}

std::string quant_text(const RunConfig& cfg) {
  const QuantKind q = base_quant(cfg);
  if (q == QuantKind::none) return "";
  const bool nested =
      (q == QuantKind::nf4 || q == QuantKind::fp4) && cfg.double_quant == Toggle::on;
  return fmt::format("{}{} base, ", to_string(q), nested ? " + double quant" : "");
}

// The settings of the plan that a trainer takes.
// The accumulation a trainer is given: the plan's, or where nothing fits the target's share of
// one GPU (micro-batch 1).
std::int64_t plan_grad_accum(const Plan& plan) {
  return plan.choice.grad_accum > 0 ? plan.choice.grad_accum
                                    : plan.target_batch.value_or(1) / plan.config.gpus;
}

// The settings of the plan that a trainer takes: per GPU, the global batch over --gpus.
std::string accumulation_text(const Plan& plan) {
  const MicroBatchChoice& c = plan.choice;
  const std::int64_t gpus = plan.config.gpus;
  if (gpus > 1)
    return fmt::format("micro-batch {} x grad-accum {} x {} GPUs = {}", c.micro_batch, c.grad_accum,
                       gpus, c.effective_batch * gpus);
  return fmt::format("micro-batch {} x grad-accum {} = {}", c.micro_batch, c.grad_accum,
                     c.effective_batch);
}

// The near alternative of a choice, listed and never planned: "3 x 5 = 15".
std::string near_text(const MicroBatchChoice& c) {
  return fmt::format("{} x {} = {}", c.near_micro_batch, c.near_grad_accum,
                     c.near_effective_batch());
}

Table settings_table(const Plan& plan) {
  Table t;
  t.columns = {{"setting", "setting", CellKind::text}, {"value", "value", CellKind::text}};
  auto row = [&](std::string setting, std::string value) {
    t.add_row({Cell::of_text(std::move(setting)), Cell::of_text(std::move(value))});
  };
  const MicroBatchChoice& c = plan.choice;
  if (!plan.fits()) {
    row("micro-batch (per_device_train_batch_size)",
        fmt::format("none fits: micro-batch 1 needs {}", format_bytes(plan.budget.device_peak)));
  } else {
    row("micro-batch (per_device_train_batch_size)", std::to_string(c.micro_batch));
    row("grad-accum (gradient_accumulation_steps)", std::to_string(c.grad_accum));
  }
  const std::int64_t gpus = plan.config.gpus;
  if (gpus > 1) row("GPUs (num_processes)", std::to_string(gpus));
  if (plan.target_batch && plan.fits()) {
    const std::int64_t largest = std::min(c.max_micro_batch, *plan.target_batch / gpus);
    const std::string global =
        gpus > 1 ? fmt::format(" ({} per GPU x {} GPUs)", c.effective_batch, gpus) : "";
    row("effective batch",
        c.micro_batch < largest
            ? fmt::format("{}{} (micro-batch {} rather than {}: it divides the target)",
                          c.effective_batch * gpus, global, c.micro_batch, largest)
            : std::to_string(c.effective_batch * gpus) + global);
    if (c.near_micro_batch > 0)
      row("near alternative (not planned)",
          fmt::format("{}: the largest micro-batch, {} micro-steps instead of {}, but an "
                      "effective batch of {}, not {} (--target-batch {} plans it)",
                      near_text(c), c.near_grad_accum, c.grad_accum, c.near_effective_batch(),
                      c.effective_batch, c.near_effective_batch()));
  }
  const std::string limit =
      plan.target_batch ? fmt::format(" (searched up to {})", *plan.target_batch / gpus) : "";
  row(fmt::format("largest micro-batch within {}", format_bytes(plan.planning_capacity)),
      std::to_string(plan.planned.search.max_batch) + limit);
  row(fmt::format("largest micro-batch on the whole {} (what search finds)",
                  format_bytes(plan.capacity)),
      std::to_string(plan.whole.search.max_batch) + limit);
  const SeqSearchResult& s = plan.longest_seq.search;
  row("longest sequence at micro-batch 1 (multiple of 64)",
      s.max_seq > 0 ? fmt::format("{}{}", s.max_seq, s.hit_limit ? " (the search limit)" : "")
                    : "none: 64 tokens do not fit");
  row("sequence planned", std::to_string(plan.config.seq));
  return t;
}

Table budget_table(const Budget& budget) {
  Table t;
  t.columns = {{"component", "component", CellKind::text},
               {"bytes", "size", CellKind::bytes},
               {"share", "share of capacity", CellKind::text}};
  for (const BudgetLine& l : budget.lines) {
    const bool always = l.key == "cuda_context" || l.key == "safety_margin" || l.key == "free";
    if (l.bytes == 0 && !always) continue;
    const bool short_by = l.key == "free" && l.bytes < 0;
    t.add_row({Cell::of_text(short_by ? "free (negative: short by this much)" : l.title),
               Cell::of_bytes(l.bytes),
               Cell::of_text(l.on_device ? share(l.bytes, budget.capacity) : "(off the card)")});
  }
  t.add_row({Cell::of_text("capacity"), Cell::of_bytes(budget.capacity),
             Cell::of_text(share(budget.capacity, budget.capacity))});
  return t;
}

Table alternatives_table(const Plan& plan) {
  Table t;
  t.columns = {
      {"rank", "#", CellKind::integer},
      {"change", "change", CellKind::text},
      {"flags", "flags", CellKind::text},
      {"peak_bytes", fmt::format("peak at micro-batch {}", plan.compared_batch), CellKind::bytes},
      {"saved_bytes", "saved", CellKind::bytes},
      {"max_micro_batch", "max micro-batch", CellKind::integer}};
  if (plan.target_batch) t.columns.push_back({"settings", "micro x accum", CellKind::text});
  std::int64_t rank = 0;
  for (const Alternative& a : plan.alternatives) {
    std::vector<Cell> row{Cell::of_int(++rank),    Cell::of_text(a.change),
                          Cell::of_text(a.flags),  Cell::of_bytes(a.peak),
                          Cell::of_bytes(a.saved), Cell::of_int(a.max_micro_batch)};
    if (plan.target_batch)
      row.push_back(Cell::of_text(a.choice.micro_batch > 0
                                      ? fmt::format("{} x {} = {}", a.choice.micro_batch,
                                                    a.choice.grad_accum, a.choice.effective_batch)
                                      : "does not fit"));
    t.add_row(std::move(row));
  }
  return t;
}

std::string python_bool(bool v) {
  return v ? "True" : "False";
}

std::string yaml_bool(bool v) {
  return v ? "true" : "false";
}

// PEFT's target_modules (the nn.Linear modules, `parameters` false) or target_parameters (an MoE
// layer's experts' 3-D weights, true) that the run targets, by PEFT's names.
std::vector<std::string> target_module_names(const RunConfig& cfg, bool parameters = false) {
  std::vector<std::string> names;
  for (LoraModule m : lora_modules(cfg.model)) {
    const bool experts = m == LoraModule::experts_gate_up || m == LoraModule::experts_down;
    if (experts != parameters || !lora_targets_module(cfg.lora_targets, cfg.model, m)) continue;
    const std::string name(lora_module_name(m));
    if (std::find(names.begin(), names.end(), name) == names.end()) names.push_back(name);
  }
  return names;
}

std::string quoted_list(const std::vector<std::string>& names) {
  std::string out = "[";
  for (const std::string& n : names) out += fmt::format("{}\"{}\"", out.size() > 1 ? ", " : "", n);
  return out + "]";
}

// What transformers is asked for: sdpa for fused attention, but flash-attention 2 where the model
// has no sdpa path (Gemma 2); eager.
std::string_view attn_implementation(const RunConfig& cfg) {
  if (cfg.attention != Attention::flash) return "eager";
  return cfg.model.fused_attention_is_fa2 ? "flash_attention_2" : "sdpa";
}

// The comment beside sdpa: flash-attention 2 keeps the same, but for sdpa's sliding-window masks,
// which it does not make (the plan counts them: on its side).
std::string_view fused_attention_note(const RunConfig& cfg) {
  if (attn_implementation(cfg) != "sdpa") return "";
  return sliding_masks_at(cfg.model, cfg.seq)
             ? "  # planned with sdpa's sliding-window masks; \"flash_attention_2\" keeps less"
             : "  # flash-attention memory; \"flash_attention_2\" keeps the same";
}

// The dtype the model is loaded in: autocast keeps fp32 weights.
std::string torch_dtype(Precision p) {
  switch (p) {
    case Precision::bf16:
      return "torch.bfloat16";
    case Precision::fp16:
      return "torch.float16";
    case Precision::fp32:
    case Precision::tf32:
    case Precision::amp_fp16:
    case Precision::amp_bf16:
      return "torch.float32";
  }
  return "torch.float32";
}

// The dtype the GEMMs compute in (bitsandbytes' compute dtype): autocast's 16-bit type.
std::string compute_dtype(Precision p) {
  if (p == Precision::amp_bf16) return torch_dtype(Precision::bf16);
  if (p == Precision::amp_fp16) return torch_dtype(Precision::fp16);
  return torch_dtype(p);
}

// Trainer's bf16=True / fp16=True: autocast, over whatever dtype the model was loaded in, where
// the hf step ran under it (hf_autocast).
bool trainer_bf16(const RunConfig& cfg) {
  return hf_autocast(cfg) && (cfg.dtype == Precision::bf16 || cfg.dtype == Precision::amp_bf16);
}
bool trainer_fp16(const RunConfig& cfg) {
  return hf_autocast(cfg) && (cfg.dtype == Precision::fp16 || cfg.dtype == Precision::amp_fp16);
}

std::string header_comment(const Plan& plan, std::string_view mark) {
  std::string out = fmt::format("{} vrambench plan: {}\n", mark, describe_recipe(plan.config));
  out += fmt::format("{} on {}, capacity {} - safety margin {} = {} to plan with\n", mark,
                     plan.device.label, format_bytes(plan.capacity), format_bytes(plan.margin),
                     format_bytes(plan.planning_capacity));
  if (plan.fits())
    out += fmt::format("{} {}; peak {} (sim replay)\n", mark, accumulation_text(plan),
                       format_bytes(plan.budget.device_peak));
  if (plan.fits() && plan.choice.near_micro_batch > 0)
    out += fmt::format(
        "{} near alternative, not planned: {} (fewer micro-steps, another effective batch)\n", mark,
        near_text(plan.choice));
  else if (!plan.fits())
    out += fmt::format(
        "{} NOTHING FITS: micro-batch 1 needs {}; see `vrambench plan` for what "
        "to change (the values below are the request)\n",
        mark, format_bytes(plan.budget.device_peak));
  return out;
}

nlohmann::json choice_json(const MicroBatchChoice& c) {
  nlohmann::json near = nullptr;
  if (c.near_micro_batch > 0)
    near = {{"micro_batch", c.near_micro_batch},
            {"grad_accum", c.near_grad_accum},
            {"effective_batch", c.near_effective_batch()}};
  return {{"max_micro_batch", c.max_micro_batch},
          {"micro_batch", c.micro_batch},
          {"grad_accum", c.grad_accum},
          {"effective_batch", c.effective_batch},
          {"near", near}};
}

nlohmann::json config_json(const RunConfig& cfg) {
  nlohmann::json j = nlohmann::json::object();
  for (const FieldInfo& f : fields()) {
    const FieldValue v = get_field(cfg, f);
    if (f.name == "batch") continue;  // the plan's micro_batch says it
    if (const auto* n = std::get_if<std::int64_t>(&v))
      j[f.kind == FieldKind::size ? std::string(f.name) + "_bytes" : std::string(f.name)] = *n;
    else if (const auto* d = std::get_if<double>(&v))
      j[std::string(f.name)] = *d;
    else
      j[std::string(f.name)] = field_text(f, v);
  }
  return j;
}

}  // namespace

namespace {
constexpr std::array<std::pair<PlanEmit, std::string_view>, 6> kPlanEmit{
    {{PlanEmit::text, "text"},
     {PlanEmit::hf, "hf"},
     {PlanEmit::axolotl, "axolotl"},
     {PlanEmit::json, "json"},
     {PlanEmit::accelerate, "accelerate"},
     {PlanEmit::deepspeed, "deepspeed"}}};
}  // namespace

template <>
EnumNames<PlanEmit> enum_names<PlanEmit>() {
  return kPlanEmit;
}

std::string_view to_string(PlanEmit e) {
  return enum_name(enum_names<PlanEmit>(), e);
}

PlanEmit parse_plan_emit(std::string_view text) {
  return parse_enum<PlanEmit>(text, "emit");
}

std::string describe_recipe(const RunConfig& cfg) {
  std::string out = fmt::format("{}, seq {}, {}, {} attention, recompute {}, {}", cfg.model.name,
                                cfg.seq, to_string(cfg.dtype), to_string(cfg.attention),
                                to_string(cfg.recompute), to_string(cfg.optimizer));
  if (is_finetune(cfg))
    out += fmt::format(", {} ({}r{}, {})", to_string(cfg.finetune), quant_text(cfg), cfg.lora_rank,
                       to_string(cfg.lora_targets));
  else
    out += ", full training";
  if (cfg.scope != Scope::model) out += fmt::format(", scope {}", to_string(cfg.scope));
  // Whose step the plan is for: where auto fell back to a hand-written trainer's, the plan says
  // why, since a transformers run keeps more.
  if (framework_of(cfg) == Framework::hf)
    out += ", framework hf (Hugging Face transformers on PyTorch)";
  else if (cfg.framework == Framework::automatic)
    out += fmt::format(
        ", framework lean (a hand-written trainer, which keeps less than a transformers run; {})",
        hf_gap(cfg));
  else
    out += ", framework lean (a hand-written trainer)";
  return out;
}

std::string plan_summary_line(const Plan& plan) {
  if (!plan.fits())
    return fmt::format(
        "plan: nothing fits at seq {} on {}: micro-batch 1 needs {}, {} to plan with ({} "
        "capacity - {} margin){}",
        plan.config.seq, plan.device.label, format_bytes(plan.budget.device_peak),
        format_bytes(plan.planning_capacity), format_bytes(plan.capacity),
        format_bytes(plan.margin),
        plan.alternatives.empty() ? "; no single change makes it fit"
                                  : "; see what to change above");
  return fmt::format("plan: {} at seq {} on {}: peak {} of {} planned ({} margin, {} free)",
                     accumulation_text(plan), plan.config.seq, plan.device.label,
                     format_bytes(plan.budget.device_peak), format_bytes(plan.planning_capacity),
                     format_bytes(plan.margin), format_bytes(plan.budget.free()));
}

std::string plan_markdown(const Plan& plan) {
  std::string out = fmt::format("Plan for {}\n", describe_recipe(plan.config));
  out += fmt::format("on {}: capacity {} - safety margin {} = {} to plan with\n\n",
                     plan.device.label, format_bytes(plan.capacity), format_bytes(plan.margin),
                     format_bytes(plan.planning_capacity));
  out += to_markdown(settings_table(plan));
  out += fmt::format("\nMemory at micro-batch {} (the step's peak, sim replay){}:\n\n",
                     plan.budget.batch, plan.fits() ? "" : ", which does not fit");
  out += to_markdown(budget_table(plan.budget));
  if (plan.compared_batch > 0) {
    if (plan.alternatives.empty()) {
      out +=
          fmt::format("\nWhat to change: no single change tried saves memory at micro-batch {}.\n",
                      plan.compared_batch);
    } else {
      out += fmt::format(
          "\nWhat to change ({}; each measured on sim, ranked by memory saved at micro-batch "
          "{}, where the plan needs {}):\n\n",
          plan.fits()
              ? fmt::format("micro-batch {} needs grad-accum {} for {}", plan.choice.micro_batch,
                            plan.choice.grad_accum, plan.target_batch.value_or(0))
              : "not even micro-batch 1 fits",
          plan.compared_batch, format_bytes(plan.compared_peak));
      out += to_markdown(alternatives_table(plan));
    }
  }
  out += fmt::format("\n{}\n", plan_summary_line(plan));
  return out;
}

std::string plan_hf_snippet(const Plan& plan) {
  const RunConfig& cfg = plan.config;
  const QuantKind q = base_quant(cfg);
  const bool quantised = is_finetune(cfg) && q != QuantKind::none;
  std::string out = header_comment(plan, "#");
  out += "import torch\n";
  if (is_finetune(cfg))
    out += fmt::format("from peft import LoraConfig, get_peft_model{}\n",
                       quantised ? ", prepare_model_for_kbit_training" : "");
  const bool preference = is_preference(cfg);
  // TRL's trainer and its config for a preference trainer: DPOConfig, KTOConfig.
  const std::string trl = cfg.trainer == Trainer::dpo ? "DPO" : "KTO";
  if (preference) {
    out += fmt::format("from transformers import AutoModelForCausalLM{}\n",
                       quantised ? ", BitsAndBytesConfig" : "");
    out += fmt::format("from trl import {0}Config, {0}Trainer\n\n", trl);
    out += fmt::format(
        "max_length = {}  # prompt + completion of each sequence, padded or truncated to it\n\n",
        cfg.seq);
  } else {
    out += fmt::format("from transformers import AutoModelForCausalLM, {}TrainingArguments\n\n",
                       quantised ? "BitsAndBytesConfig, " : "");
    out += fmt::format(
        "max_seq_length = {}  # tokenise or pack to this length (TRL's SFTConfig: max_length)\n\n",
        cfg.seq);
  }
  if (quantised) {
    out += "bnb_config = BitsAndBytesConfig(\n";
    if (q == QuantKind::int8) {
      out += "    load_in_8bit=True,\n";
    } else {
      out += "    load_in_4bit=True,\n";
      out += fmt::format("    bnb_4bit_quant_type=\"{}\",\n", to_string(q));
      out += fmt::format("    bnb_4bit_use_double_quant={},\n",
                         python_bool(cfg.double_quant == Toggle::on));
      out += fmt::format("    bnb_4bit_compute_dtype={},\n", compute_dtype(cfg.dtype));
    }
    out += ")\n\n";
  }
  if (is_finetune(cfg)) {
    out += "lora_config = LoraConfig(\n";
    out += fmt::format("    r={},\n", cfg.lora_rank);
    out += fmt::format("    lora_alpha={:g},\n", cfg.lora_alpha);
    out += fmt::format("    lora_dropout={:g},\n", cfg.lora_dropout);
    if (cfg.lora_targets.shorthand == LoraTargets::Shorthand::all_linear)
      out += "    target_modules=\"all-linear\",\n";
    else if (const auto modules = target_module_names(cfg); !modules.empty())
      out += fmt::format("    target_modules={},\n", quoted_list(modules));
    if (const auto parameters = target_module_names(cfg, true); !parameters.empty())
      out += fmt::format("    target_parameters={},\n", quoted_list(parameters));
    out += "    task_type=\"CAUSAL_LM\",\n)\n\n";
  }
  out += "model_kwargs = dict(\n";
  out += fmt::format("    torch_dtype={},\n", torch_dtype(cfg.dtype));
  out += fmt::format("    attn_implementation=\"{}\",{}\n", attn_implementation(cfg),
                     fused_attention_note(cfg));
  if (quantised) out += "    quantization_config=bnb_config,\n";
  out += ")\n";
  // The model as the step was modelled: loaded, prepared for k-bit training (fp32 embeddings,
  // norms and head; input gradients), wrapped by PEFT. Commented: MODEL is the user's.
  const bool ckpt = cfg.recompute == Recompute::full;
  out += "# model = AutoModelForCausalLM.from_pretrained(MODEL, **model_kwargs)\n";
  if (quantised)
    out += fmt::format(
        "# model = prepare_model_for_kbit_training(\n#     model, "
        "use_gradient_checkpointing={}{})\n",
        python_bool(ckpt),
        ckpt ? ",\n#     gradient_checkpointing_kwargs={\"use_reentrant\": False}" : "");
  if (is_finetune(cfg)) out += "# model = get_peft_model(model, lora_config)\n";
  const Reference reference = preference ? reference_of(cfg) : Reference::automatic;
  if (reference == Reference::copy)
    out +=
        "# ref_model = AutoModelForCausalLM.from_pretrained(MODEL, **model_kwargs)"
        "  # the frozen copy planned\n";
  out += "\n";
  out += preference ? fmt::format("training_args = {}Config(\n", trl)
                    : std::string("training_args = TrainingArguments(\n");
  out += "    output_dir=\"out\",\n";
  out += fmt::format(
      "    per_device_train_batch_size={},{}\n", std::max<std::int64_t>(plan.choice.micro_batch, 1),
      cfg.trainer == Trainer::dpo ? "  # pairs (chosen and rejected)"
      : cfg.trainer == Trainer::kto
          ? (plan.choice.micro_batch < 2 ? "  # examples: KTOTrainer refuses 1" : "  # examples")
          : "");
  if (preference) {
    out += "    max_length=max_length,\n";
    if (reference == Reference::precomputed) out += "    precompute_ref_log_probs=True,\n";
  }
  out += fmt::format("    gradient_accumulation_steps={},\n", plan_grad_accum(plan));
  out += fmt::format("    gradient_checkpointing={},\n", python_bool(ckpt));
  // Non-reentrant checkpointing is modelled (transformers' default; the reentrant kind peaks the
  // same, tests/data/README.md).
  if (ckpt) out += "    gradient_checkpointing_kwargs={\"use_reentrant\": False},\n";
  if (cfg.optimizer == Optimizer::none)
    out += "    # no optimizer step was planned (--optimizer none)\n";
  else
    out += fmt::format("    optim=\"{}\",\n", hf_optim_name(cfg.optimizer));
  if (trainer_bf16(cfg)) out += "    bf16=True,\n";
  if (trainer_fp16(cfg)) out += "    fp16=True,\n";
  if (!hf_autocast(cfg) && (cfg.dtype == Precision::bf16 || cfg.dtype == Precision::fp16))
    out += fmt::format(
        "    # no {0}=True: planned for the model loaded in {1} without autocast\n"
        "    # ({0}=True adds autocast; --dtype amp-{0} plans an fp32 model under it)\n",
        cfg.dtype == Precision::bf16 ? "bf16" : "fp16", torch_dtype(cfg.dtype));
  if (cfg.dtype == Precision::tf32) out += "    tf32=True,\n";
  out += ")\n";
  if (preference) {
    out += fmt::format(
        "# trainer = {}Trainer(model=model, ref_model={}, args=training_args,\n"
        "#                     train_dataset=DATASET)\n",
        trl, reference == Reference::copy ? "ref_model" : "None");
    if (reference == Reference::adapters)
      out +=
          "# (ref_model=None under PEFT: the reference is the model with its adapters disabled)\n";
  }
  return out;
}

std::string plan_axolotl_yaml(const Plan& plan) {
  const RunConfig& cfg = plan.config;
  const QuantKind q = base_quant(cfg);
  std::string out = header_comment(plan, "#");
  if (is_preference(cfg)) out += fmt::format("rl: {}\n", to_string(cfg.trainer));
  out += fmt::format("sequence_len: {}\n", cfg.seq);
  out += fmt::format("micro_batch_size: {}\n", std::max<std::int64_t>(plan.choice.micro_batch, 1));
  out += fmt::format("gradient_accumulation_steps: {}\n", plan_grad_accum(plan));
  out += fmt::format("gradient_checkpointing: {}\n", yaml_bool(cfg.recompute == Recompute::full));
  if (cfg.optimizer != Optimizer::none)
    out += fmt::format("optimizer: {}\n", hf_optim_name(cfg.optimizer));
  out += fmt::format("bf16: {}\n", yaml_bool(trainer_bf16(cfg)));
  out += fmt::format("fp16: {}\n", yaml_bool(trainer_fp16(cfg)));
  // Axolotl's keys for a model loaded in 16 bits without autocast.
  if (!hf_autocast(cfg) && cfg.dtype == Precision::bf16) out += "bfloat16: true\n";
  if (!hf_autocast(cfg) && cfg.dtype == Precision::fp16) out += "float16: true\n";
  out += fmt::format("tf32: {}\n", yaml_bool(cfg.dtype == Precision::tf32));
  out += fmt::format("flash_attention: {}\n", yaml_bool(cfg.attention == Attention::flash));
  if (cfg.attention == Attention::flash && sliding_masks_at(cfg.model, cfg.seq))
    out += "# planned with sdpa's sliding-window masks; flash-attention 2 keeps less\n";
  if (is_finetune(cfg)) {
    out +=
        fmt::format("adapter: {}\n", q == QuantKind::nf4 || q == QuantKind::fp4 ? "qlora" : "lora");
    if (q == QuantKind::nf4 || q == QuantKind::fp4) out += "load_in_4bit: true\n";
    if (q == QuantKind::fp4) out += "# axolotl's qlora quantises to nf4; fp4 was planned\n";
    if (q == QuantKind::int8) out += "load_in_8bit: true\n";
    out += fmt::format("lora_r: {}\n", cfg.lora_rank);
    out += fmt::format("lora_alpha: {:g}\n", cfg.lora_alpha);
    out += fmt::format("lora_dropout: {:g}\n", cfg.lora_dropout);
    if (cfg.lora_targets.shorthand == LoraTargets::Shorthand::all_linear) {
      out += "lora_target_linear: true\n";
    } else if (const auto modules = target_module_names(cfg); !modules.empty()) {
      out += "lora_target_modules:\n";
      for (const std::string& name : modules) out += fmt::format("  - {}\n", name);
    }
    if (const auto parameters = target_module_names(cfg, true); !parameters.empty()) {
      out += "lora_target_parameters:\n";
      for (const std::string& name : parameters) out += fmt::format("  - {}\n", name);
    }
  }
  return out;
}

nlohmann::json plan_json(const Plan& plan) {
  nlohmann::json j;
  j["config"] = config_json(plan.config);
  j["recipe"] = describe_recipe(plan.config);
  j["framework"] = to_string(framework_of(plan.config));
  j["device"] = plan.device.label;
  j["capacity_bytes"] = plan.capacity;
  j["safety_margin_bytes"] = plan.margin;
  j["planning_capacity_bytes"] = plan.planning_capacity;
  j["cuda_context_bytes"] = plan.device.fixed_overhead;
  j["seq"] = plan.config.seq;
  j["fits"] = plan.fits();
  if (plan.target_batch)
    j["target_batch"] = *plan.target_batch;
  else
    j["target_batch"] = nullptr;
  j["plan"] = choice_json(plan.choice);
  j["max_micro_batch"] = plan.planned.search.max_batch;
  j["max_micro_batch_whole_capacity"] = plan.whole.search.max_batch;
  j["est_max_micro_batch"] = plan.planned.est_max_batch;
  nlohmann::json trials = nlohmann::json::array();
  for (const Probe& p : plan.planned.search.trials)
    trials.push_back({{"batch", p.batch}, {"fit", p.fits}});
  j["trials"] = trials;
  const SeqMeasurement& s = plan.longest_seq;
  nlohmann::json seq_trials = nlohmann::json::array();
  for (const Probe& p : s.search.trials) seq_trials.push_back({{"seq", p.batch}, {"fit", p.fits}});
  j["longest_seq"] = {{"micro_batch", 1},
                      {"max_seq", s.search.max_seq},
                      {"est_max_seq", s.est_max_seq},
                      {"hit_limit", s.search.hit_limit},
                      {"trials", seq_trials}};
  nlohmann::json budget = {{"micro_batch", plan.budget.batch},
                           {"fits", plan.budget.fits},
                           {"device_peak_bytes", plan.budget.device_peak},
                           {"capacity_bytes", plan.budget.capacity}};
  nlohmann::json lines = nlohmann::json::array();
  for (const BudgetLine& l : plan.budget.lines)
    lines.push_back({{"component", l.key},
                     {"title", l.title},
                     {"bytes", l.bytes},
                     {"on_device", l.on_device},
                     {"share_of_capacity",
                      plan.capacity > 0 && l.on_device
                          ? static_cast<double>(l.bytes) / static_cast<double>(plan.capacity)
                          : 0.0}});
  budget["lines"] = lines;
  j["budget"] = budget;
  nlohmann::json alternatives = nlohmann::json::array();
  for (const Alternative& a : plan.alternatives) {
    nlohmann::json alt = {{"change", a.change},
                          {"flags", a.flags},
                          {"peak_bytes", a.peak},
                          {"saved_bytes", a.saved},
                          {"max_micro_batch", a.max_micro_batch}};
    if (plan.target_batch) alt["plan"] = choice_json(a.choice);
    alternatives.push_back(std::move(alt));
  }
  j["alternatives_compared_at_micro_batch"] = plan.compared_batch;
  j["alternatives_compared_peak_bytes"] = plan.compared_peak;
  j["alternatives"] = alternatives;
  j["summary"] = plan_summary_line(plan);
  return j;
}

std::string plans_markdown(const std::vector<Plan>& plans,
                           const std::vector<std::string>& varying) {
  Table t;
  for (const std::string& f : key_columns(varying))
    t.columns.push_back(
        {f, f, find_field(f).kind == FieldKind::integer ? CellKind::integer : CellKind::text});
  const bool with_target = !plans.empty() && plans.front().target_batch.has_value();
  t.columns.push_back({"max_micro_batch", "max micro-batch", CellKind::integer});
  if (with_target) {
    t.columns.push_back({"micro_batch", "micro-batch", CellKind::integer});
    t.columns.push_back({"grad_accum", "grad-accum", CellKind::integer});
    t.columns.push_back({"effective_batch", "effective", CellKind::integer});
    t.columns.push_back({"near", "near (not planned)", CellKind::text});
  }
  t.columns.push_back({"max_seq", "longest seq at 1", CellKind::integer});
  t.columns.push_back({"peak_bytes", "peak", CellKind::bytes});
  t.columns.push_back({"free_bytes", "free", CellKind::bytes});
  t.columns.push_back({"best_change", "best change", CellKind::text});
  std::int64_t fitting = 0;
  for (const Plan& p : plans) {
    std::vector<Cell> row;
    for (const std::string& f : key_columns(varying)) {
      const FieldInfo& info = find_field(f);
      const FieldValue v = get_field(p.config, info);
      if (const auto* n = std::get_if<std::int64_t>(&v); n && info.kind == FieldKind::integer)
        row.push_back(Cell::of_int(*n));
      else
        row.push_back(Cell::of_text(info.kind == FieldKind::size
                                        ? format_bytes(std::get<std::int64_t>(v))
                                        : field_text(info, v)));
    }
    row.push_back(Cell::of_int(p.planned.search.max_batch));
    if (with_target) {
      row.push_back(Cell::of_int(p.choice.micro_batch));
      row.push_back(Cell::of_int(p.choice.grad_accum));
      row.push_back(Cell::of_int(p.choice.effective_batch));
      row.push_back(p.choice.near_micro_batch > 0 ? Cell::of_text(near_text(p.choice))
                                                  : Cell::none(CellKind::text));
    }
    row.push_back(Cell::of_int(p.longest_seq.search.max_seq));
    row.push_back(Cell::of_bytes(p.budget.device_peak));
    row.push_back(Cell::of_bytes(p.budget.free()));
    row.push_back(p.alternatives.empty() ? Cell::none(CellKind::text)
                                         : Cell::of_text(p.alternatives.front().flags));
    t.add_row(std::move(row));
    fitting += p.fits() ? 1 : 0;
  }
  std::string out = to_markdown(t);
  out += fmt::format("\n{} configuration{} planned on {}, {} fit at micro-batch 1 or more\n",
                     plans.size(), plans.size() == 1 ? "" : "s",
                     plans.empty() ? std::string("-") : plans.front().device.label, fitting);
  return out;
}

nlohmann::json plans_json(const std::vector<Plan>& plans, const std::vector<std::string>& varying) {
  nlohmann::json out;
  out["varying"] = varying;
  out["plans"] = nlohmann::json::array();
  for (const Plan& p : plans) out["plans"].push_back(plan_json(p));
  return out;
}

}  // namespace vrambench

namespace vrambench {
namespace {

// The decoder layer class transformers names for the model_type, which FSDP wraps one by one.
std::string decoder_layer_class(const ModelConfig& m) {
  static const std::pair<std::string_view, std::string_view> kClasses[] = {
      {"gpt2", "GPT2Block"},
      {"llama", "LlamaDecoderLayer"},
      {"mistral", "MistralDecoderLayer"},
      {"qwen2", "Qwen2DecoderLayer"},
      {"qwen3", "Qwen3DecoderLayer"},
      {"gemma", "GemmaDecoderLayer"},
      {"gemma2", "Gemma2DecoderLayer"},
      {"gemma3_text", "Gemma3DecoderLayer"},
      {"phi3", "Phi3DecoderLayer"}};
  for (const auto& [type, name] : kClasses)
    if (m.model_type == type) return std::string(name);
  return m.arch == Arch::gpt ? "GPT2Block" : "LlamaDecoderLayer";
}

// accelerate's mixed_precision for the plan: DeepSpeed's bf16 / fp16 for a ZeRO plan, else
// autocast's, as the Trainer's bf16=True / fp16=True.
std::string_view accelerate_mixed_precision(const RunConfig& cfg) {
  if (is_zero(cfg.strategy))
    return cfg.dtype == Precision::bf16 ? "bf16" : cfg.dtype == Precision::fp16 ? "fp16" : "no";
  return trainer_bf16(cfg) ? "bf16" : trainer_fp16(cfg) ? "fp16" : "no";
}

}  // namespace

std::string plan_accelerate_yaml(const Plan& plan) {
  const RunConfig& cfg = plan.config;
  const Strategy s = cfg.strategy;
  std::string out = header_comment(plan, "#");
  out += "# accelerate launch --config_file THIS_FILE train.py\n";
  // 'NO' quoted: YAML reads a bare NO as false.
  const std::string_view type = cfg.gpus == 1 && s == Strategy::ddp ? "'NO'"
                                : is_zero(s)                        ? "DEEPSPEED"
                                : is_fsdp(s)                        ? "FSDP"
                                                                    : "MULTI_GPU";
  const std::int64_t per_node = std::min(cfg.gpus, kGpusPerNode);
  const std::int64_t machines = (cfg.gpus + kGpusPerNode - 1) / kGpusPerNode;
  out += "compute_environment: LOCAL_MACHINE\n";
  out += "debug: false\n";
  out += fmt::format("distributed_type: {}\n", type);
  out += "downcast_bf16: 'no'\n";
  out += "machine_rank: 0\n";
  out += "main_training_function: main\n";
  out += fmt::format("mixed_precision: '{}'\n", accelerate_mixed_precision(cfg));
  if (is_fsdp(s) && !hf_autocast(cfg) && cfg.dtype != Precision::fp32)
    out += fmt::format(
        "# planned for the model loaded in {} (no MixedPrecisionPolicy); mixed_precision bf16 "
        "would "
        "keep fp32 sharded parameters\n",
        torch_dtype(cfg.dtype));
  out += fmt::format("num_machines: {}\n", machines);
  out += fmt::format("num_processes: {}\n", cfg.gpus);
  out += "rdzv_backend: static\n";
  out += "same_network: true\n";
  out += "use_cpu: false\n";
  if (is_fsdp(s)) {
    out += "fsdp_config:\n";
    out += "  fsdp_version: 2\n";
    out += "  fsdp_auto_wrap_policy: TRANSFORMER_BASED_WRAP\n";
    out +=
        fmt::format("  fsdp_transformer_layer_cls_to_wrap: {}\n", decoder_layer_class(cfg.model));
    out += "  fsdp_reshard_after_forward: true\n";
    out += fmt::format("  fsdp_offload_params: {}\n", yaml_bool(cfg.offload == Offload::params));
    out += "  fsdp_state_dict_type: SHARDED_STATE_DICT\n";
    out += "  fsdp_cpu_ram_efficient_loading: true\n";
    out += "  fsdp_sync_module_states: true\n";
    out += "  # checkpointing as planned: TrainingArguments(gradient_checkpointing=...)\n";
    out += "  fsdp_activation_checkpointing: false\n";
    if (s == Strategy::hsdp && cfg.gpus > per_node) {
      out += "parallelism_config:\n";
      out += fmt::format("  parallelism_config_dp_replicate_size: {}\n", cfg.gpus / per_node);
      out += fmt::format("  parallelism_config_dp_shard_size: {}\n", per_node);
    }
  }
  if (is_zero(s)) {
    out += "deepspeed_config:\n";
    out += fmt::format("  zero_stage: {}\n", s == Strategy::zero1   ? 1
                                             : s == Strategy::zero2 ? 2
                                                                    : 3);
    out += fmt::format("  offload_optimizer_device: {}\n",
                       cfg.offload == Offload::none ? "none" : "cpu");
    out += fmt::format("  offload_param_device: {}\n",
                       cfg.offload == Offload::params ? "cpu" : "none");
    out += fmt::format("  gradient_accumulation_steps: {}\n", plan_grad_accum(plan));
    out += "  gradient_clipping: 1.0\n";
    out += fmt::format("  zero3_init_flag: {}\n", yaml_bool(s == Strategy::zero3));
    out += fmt::format("  zero3_save_16bit_model: {}\n", yaml_bool(s == Strategy::zero3));
  }
  return out;
}

void require_zero_strategy(const RunConfig& cfg) {
  if (!is_zero(cfg.strategy))
    throw UsageError(fmt::format(
        "--emit deepspeed writes a ZeRO config: plan with --strategy zero1, zero2 or zero3 (got "
        "{}); --emit accelerate writes the config of every strategy",
        to_string(cfg.strategy)));
}

nlohmann::ordered_json plan_deepspeed_json(const Plan& plan) {
  const RunConfig& cfg = plan.config;
  require_zero_strategy(cfg);
  const int stage = cfg.strategy == Strategy::zero1 ? 1 : cfg.strategy == Strategy::zero2 ? 2 : 3;
  const std::int64_t micro = std::max<std::int64_t>(plan.choice.micro_batch, 1);
  const std::int64_t accum = plan_grad_accum(plan);
  nlohmann::ordered_json zero;
  zero["stage"] = stage;
  zero["offload_optimizer"] = {{"device", cfg.offload == Offload::none ? "none" : "cpu"}};
  if (stage == 3)
    zero["offload_param"] = {{"device", cfg.offload == Offload::params ? "cpu" : "none"}};
  zero["contiguous_gradients"] = true;
  zero["overlap_comm"] = stage == 3;
  zero["reduce_bucket_size"] = kZeroReduceBucket;
  if (stage == 3) {
    zero["stage3_prefetch_bucket_size"] = kZero3PrefetchBucket;
    zero["stage3_param_persistence_threshold"] = kZero3PersistenceThreshold;
    zero["stage3_max_live_parameters"] = 1000000000;
    zero["stage3_max_reuse_distance"] = 1000000000;
    zero["sub_group_size"] = kZero3SubGroup;
    zero["stage3_gather_16bit_weights_on_model_save"] = true;
  }
  nlohmann::ordered_json j;
  j["train_micro_batch_size_per_gpu"] = micro;
  j["gradient_accumulation_steps"] = accum;
  j["train_batch_size"] = micro * accum * cfg.gpus;
  j["gradient_clipping"] = 1.0;
  j["bf16"] = {{"enabled", cfg.dtype == Precision::bf16}};
  j["fp16"] = {{"enabled", cfg.dtype == Precision::fp16}};
  j["zero_optimization"] = zero;
  return j;
}

}  // namespace vrambench
