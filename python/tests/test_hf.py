"""vrambench.hf: plan_for reads what a training script built, and VramCallback checks the
configured micro-batch when training begins. The first tests hold stand-ins with the attributes
transformers' objects have (no transformers needed); the last train a tiny Llama with
transformers' Trainer, where transformers (and peft) are installed."""

import sys
import warnings
from types import SimpleNamespace

import pytest

import vrambench
from vrambench import hf

TINY = {
    "model_type": "llama",
    "_name_or_path": "tiny-llama",
    "hidden_size": 64,
    "intermediate_size": 128,
    "num_hidden_layers": 2,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "vocab_size": 256,
    "max_position_embeddings": 512,
    "attention_dropout": 0.0,
    "torch_dtype": "float32",
}
SEQ = 128


class Config:
    """What plan_for reads of a transformers config: model_type, to_dict() and a few attributes."""

    def __init__(self, **fields):
        self.__dict__.update(fields)

    def to_dict(self):
        return dict(self.__dict__)


def stand_in_model(dtype="torch.float32", **extra):
    return SimpleNamespace(config=Config(**{**TINY, **extra}), dtype=dtype)


def stand_in_args(**fields):
    args = dict(
        per_device_train_batch_size=4,
        gradient_accumulation_steps=2,
        optim="adamw_torch",
        gradient_checkpointing=False,
        bf16=False,
        fp16=False,
        tf32=None,
        max_length=SEQ,
        device=None,
    )
    args.update(fields)
    return SimpleNamespace(**args)


@pytest.mark.parametrize(
    "dtype, args, quant, expected",
    [
        ("torch.float32", {}, None, "fp32"),
        ("torch.float32", {"bf16": True}, None, "amp-bf16"),
        ("torch.float32", {"fp16": True}, None, "amp-fp16"),
        ("torch.float32", {"tf32": True}, None, "tf32"),
        ("torch.bfloat16", {}, None, "bf16"),
        ("torch.bfloat16", {"bf16": True}, None, "bf16"),
        ("torch.float16", {}, None, "fp16"),
        # A 4-bit base: the trainer's autocast, else the compute dtype.
        ("torch.float32", {"bf16": True}, {"load_in_4bit": True, "bnb_4bit_quant_type": "nf4"}, "bf16"),
        ("torch.float32", {}, {"load_in_4bit": True, "bnb_4bit_compute_dtype": "torch.float16"}, "fp16"),
    ],
)
def test_the_dtype_is_the_models_under_the_trainers_precision(dtype, args, quant, expected):
    options = hf.options_for(
        stand_in_model(dtype), stand_in_args(**args), peft_config={"r": 4} if quant else None, bnb_config=quant
    )
    assert options["dtype"] == expected


def test_options_for_reads_the_training_arguments():
    options = hf.options_for(
        stand_in_model(), stand_in_args(optim="paged_adamw_8bit", gradient_checkpointing=True,
                                        per_device_train_batch_size=3, gradient_accumulation_steps=5)
    )
    assert options["optimizer"] == "paged_adamw_8bit"  # the engine reads transformers' names
    assert options["recompute"] == "full"
    assert options["target_batch"] == 15
    assert options["seq"] == SEQ
    assert "dropout" not in options
    fused = hf.options_for(stand_in_model(), stand_in_args(optim="adamw_torch_fused"))
    assert vrambench.plan(**fused, vram="8GiB").config["optimizer"] == "adamw"
    with pytest.raises(ValueError, match="adafactor"):
        hf.plan_for(stand_in_model(), stand_in_args(optim="adafactor"), vram="8GiB")
    # The attention implementation and the dropout of the model's config.
    eager = hf.options_for(stand_in_model(_attn_implementation="eager", attention_dropout=0.1), stand_in_args())
    assert eager["attention"] == "eager" and eager["dropout"] == 0.1
    sdpa = hf.options_for(stand_in_model(_attn_implementation="sdpa"), stand_in_args())
    assert sdpa["attention"] == "flash"
    # TRL's older name for the sequence; seq= over both; none at all is a mistake.
    assert hf.options_for(stand_in_model(), stand_in_args(max_length=None, max_seq_length=64))["seq"] == 64
    assert hf.options_for(stand_in_model(), stand_in_args(), seq=256)["seq"] == 256
    with pytest.raises(ValueError, match="seq=N"):
        hf.options_for(stand_in_model(), stand_in_args(max_length=None))


def test_options_for_reads_a_peft_model_and_its_quantisation():
    lora = SimpleNamespace(r=8, lora_alpha=16, lora_dropout=0.0, target_modules={"v_proj", "q_proj"})
    bnb = {"load_in_4bit": True, "bnb_4bit_quant_type": "nf4", "bnb_4bit_use_double_quant": True,
           "quant_method": "bitsandbytes"}
    model = SimpleNamespace(config=Config(**TINY, quantization_config=bnb), dtype="torch.float32",
                            peft_config={"default": lora}, active_adapter="default")
    options = hf.options_for(model, stand_in_args(bf16=True))
    assert options["peft_config"] is lora and options["bnb_config"] == bnb
    args = vrambench.command_line("plan", **options)
    flags = dict(zip(args[3::2], args[4::2]))
    assert flags["--finetune"] == "qlora" and flags["--quant"] == "nf4"
    assert flags["--lora-targets"] == "q_proj,v_proj" and flags["--dtype"] == "bf16"
    gptq = SimpleNamespace(config=Config(**TINY, quantization_config={"quant_method": "gptq"}))
    with pytest.raises(ValueError, match="gptq"):
        hf.options_for(gptq, stand_in_args())


def test_plan_for_is_vrambench_plan_of_what_was_read():
    plan = hf.plan_for(stand_in_model(), stand_in_args(), vram="8GiB")
    assert plan == vrambench.plan(TINY, dtype="fp32", optimizer="adamw_torch", recompute="none",
                                  attention="flash", target_batch=8, seq=SEQ, vram="8GiB")
    assert plan.micro_batch * plan.grad_accum == 8
    with pytest.raises(ValueError, match="no CUDA device"):
        hf.plan_for(stand_in_model(), stand_in_args())


def peak(batch: int, accum: int) -> int:
    table = vrambench.estimate(TINY, dtype="fp32", seq=SEQ, batch=batch, grad_accum=accum, vram="80GiB")
    return table[0].est_peak_bytes


def tight_vram(accum: int = 2) -> str:
    """A card on which micro-batch 1 fits and 4 does not (no margin)."""
    return f"{(peak(1, accum) + peak(4, accum)) // 2}B"


def test_the_callback_says_a_micro_batch_fits():
    callback = hf.VramCallback(vram="8GiB")
    assert callback.on_train_begin(stand_in_args(), None, "control", model=stand_in_model()) == "control"
    assert callback.fits is True
    assert "per_device_train_batch_size=4 with gradient_accumulation_steps=2 fits" in callback.message
    # Searched up to the micro-batch as set; the plan for the effective batch says what else fits.
    assert callback.configured.max_micro_batch == 4
    assert (callback.plan.micro_batch, callback.plan.grad_accum) == (8, 1)
    assert "8 x 1 would fit too" in callback.message


def test_the_callback_warns_and_says_what_to_set_for_the_same_effective_batch():
    args = stand_in_args()
    callback = hf.VramCallback(vram=tight_vram(), safety_margin="0")
    with pytest.warns(UserWarning, match="does not fit") as caught:
        callback.on_train_begin(args, None, None, model=stand_in_model())
    assert callback.fits is False
    plan = callback.plan
    assert 1 <= plan.micro_batch < 4 and plan.micro_batch * plan.grad_accum == 8
    message = str(caught[0].message)
    assert f"set per_device_train_batch_size={plan.micro_batch}, gradient_accumulation_steps={plan.grad_accum}" in message
    # Nothing changed behind the script's back.
    assert args.per_device_train_batch_size == 4 and args.gradient_accumulation_steps == 2


def test_the_callback_raises_on_request():
    callback = hf.VramCallback(vram=tight_vram(), safety_margin="0", on_mismatch="raise")
    with pytest.raises(hf.DoesNotFit) as raised:
        callback.on_train_begin(stand_in_args(), None, None, model=stand_in_model())
    assert raised.value.plan.micro_batch < 4


def test_the_callback_never_stops_a_run_it_cannot_check():
    callback = hf.VramCallback(vram="8GiB", on_mismatch="raise")
    with pytest.warns(UserWarning, match="cannot check"):
        callback.on_train_begin(stand_in_args(max_length=None), None, None, model=stand_in_model())
    assert callback.fits is None
    callback = hf.VramCallback(on_mismatch="raise")
    with pytest.warns(UserWarning, match="no CUDA device"):
        callback.on_train_begin(stand_in_args(), None, None, model=stand_in_model())


def test_this_card_is_its_total_less_other_processes(monkeypatch):
    cuda = SimpleNamespace(
        is_available=lambda: True,
        current_device=lambda: 0,
        mem_get_info=lambda index: (60 << 30, 80 << 30),  # 20 GiB used
        memory_reserved=lambda index: 12 << 30,  # 12 of them this process's cache
    )
    monkeypatch.setitem(sys.modules, "torch", SimpleNamespace(cuda=cuda))
    monkeypatch.setattr(hf, "_other_processes", lambda index: 3 << 30)
    assert hf.this_card() == 77 << 30
    # Without NVML whatever is not this process's cache counts as used.
    monkeypatch.setattr(hf, "_other_processes", lambda index: None)
    assert hf.this_card() == 72 << 30
    monkeypatch.setattr(cuda, "is_available", lambda: False)
    assert hf.this_card() is None


# With transformers: a tiny Llama trained one step by transformers' Trainer.


def tiny_trainer(tmp_path, callback, micro=4, accum=2, **model_kwargs):
    transformers = pytest.importorskip("transformers")
    torch = pytest.importorskip("torch")
    fields = {k: v for k, v in TINY.items() if not k.startswith("_") and k not in ("model_type", "torch_dtype")}
    config = transformers.LlamaConfig(**fields)
    torch.manual_seed(0)
    model = transformers.LlamaForCausalLM(config)
    if "peft_config" in model_kwargs:
        peft = pytest.importorskip("peft")
        model = peft.get_peft_model(model, model_kwargs["peft_config"])
    args = transformers.TrainingArguments(
        output_dir=str(tmp_path),
        per_device_train_batch_size=micro,
        gradient_accumulation_steps=accum,
        max_steps=1,
        use_cpu=True,
        report_to=[],
        save_strategy="no",
        remove_unused_columns=False,
        optim="adamw_torch",
    )
    ids = torch.randint(0, TINY["vocab_size"], (micro * accum, SEQ))
    data = [{"input_ids": row, "labels": row} for row in ids]
    return model, args, transformers.Trainer(model=model, args=args, train_dataset=data, callbacks=[callback])


def test_a_trainer_runs_the_callback_at_its_start(tmp_path):
    callback = hf.VramCallback(seq=SEQ, vram="8GiB")
    model, args, trainer = tiny_trainer(tmp_path, callback)
    trainer.train()
    assert callback.fits is True, callback.message
    assert callback.plan.config["hidden"] == 64
    # What plan_for reads of the real objects is what the stand-ins above give.
    assert hf.options_for(model, args, seq=SEQ)["dtype"] == "fp32"
    read = hf.plan_for(model, args, seq=SEQ, vram="8GiB")
    expected = vrambench.plan(TINY, dtype="fp32", optimizer="adamw", target_batch=8, seq=SEQ, vram="8GiB")
    assert (read.plan, read.budget, read.longest_seq) == (expected.plan, expected.budget, expected.longest_seq)


def test_a_trainer_warns_when_the_micro_batch_does_not_fit(tmp_path):
    callback = hf.VramCallback(seq=SEQ, vram=tight_vram(), safety_margin="0")
    model, args, trainer = tiny_trainer(tmp_path, callback)
    with pytest.warns(UserWarning, match="does not fit"):
        trainer.train()
    assert callback.fits is False
    assert args.per_device_train_batch_size == 4 and args.gradient_accumulation_steps == 2


def test_a_trainer_stops_when_asked_to(tmp_path):
    callback = hf.VramCallback(seq=SEQ, vram=tight_vram(), safety_margin="0", on_mismatch="raise")
    model, args, trainer = tiny_trainer(tmp_path, callback)
    with pytest.raises(hf.DoesNotFit):
        trainer.train()


def test_plan_for_reads_a_peft_model(tmp_path):
    peft = pytest.importorskip("peft")
    lora = peft.LoraConfig(r=4, lora_alpha=8, target_modules=["q_proj", "v_proj"], task_type="CAUSAL_LM")
    callback = hf.VramCallback(seq=SEQ, vram="8GiB")
    model, args, trainer = tiny_trainer(tmp_path, callback, peft_config=lora)
    trainer.train()
    assert callback.fits is True, callback.message
    plan = hf.plan_for(model, args, seq=SEQ, vram="8GiB")
    assert plan.config["finetune"] == "lora" and plan.config["lora-rank"] == 4
    assert plan.config["lora-targets"] == "q_proj+v_proj"
    expected = vrambench.plan(TINY, dtype="fp32", optimizer="adamw", finetune="lora", lora_rank=4,
                              lora_alpha=8, lora_dropout=0.0, lora_targets="q_proj,v_proj",
                              target_batch=8, seq=SEQ, vram="8GiB")
    assert (plan.plan, plan.budget, plan.longest_seq) == (expected.plan, expected.budget, expected.longest_seq)
