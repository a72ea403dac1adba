"""vrambench inside a Hugging Face training script: the plan for what the script built, and a
check at the start of training.

``plan_for(model, training_args, peft_config, bnb_config)`` reads the model's config and dtype,
the LoRA targets, the quantisation, ``optim``, ``gradient_checkpointing``,
``per_device_train_batch_size`` and ``gradient_accumulation_steps`` (their product is the
effective batch planned for), and TRL's ``max_length``/``max_seq_length``, and returns
``vrambench.plan``'s answer. ``VramCallback`` runs it when training begins and says whether the
configured micro-batch fits this card with the margin, and what to set instead; it never changes
the arguments. transformers, peft and bitsandbytes are read, never imported, except that the
callback derives from transformers' ``TrainerCallback`` where transformers is installed.
"""

from __future__ import annotations

import logging
import sys
import warnings
from typing import Any, Dict, Optional, Union

from . import api
from .results import Plan

__all__ = ["DoesNotFit", "VramCallback", "options_for", "plan_for", "this_card"]

log = logging.getLogger("vrambench")

# Attention implementations that do not keep the S x S probabilities.
_FLASH = {"sdpa", "flash_attention_2", "flash_attention_3", "flex_attention"}
# The dropout probabilities of transformers' configs: where any is above 0, the step keeps masks.
_DROPOUTS = ("attention_dropout", "attn_pdrop", "resid_pdrop", "embd_pdrop")


def _dtype_name(dtype: Any) -> Optional[str]:
    """"bfloat16" for torch.bfloat16 or the text "bfloat16"; None for None."""
    if dtype is None:
        return None
    text = str(dtype)
    return text[len("torch.") :] if text.startswith("torch.") else text


def _peft_config_of(model: Any) -> Any:
    """The active adapter's config of a PEFT model (``get_peft_model``'s), or None."""
    configs = getattr(model, "peft_config", None)
    if not isinstance(configs, dict) or not configs:
        return None
    active = getattr(model, "active_adapter", None)
    if isinstance(active, (list, tuple)):
        active = active[0] if active else None
    return configs.get(active) or next(iter(configs.values()))


def _dtype_option(model_dtype: Optional[str], args: Any, quant: Dict[str, Any], bnb: Any) -> str:
    """--dtype for the model's dtype and the trainer's precision flags (docs/plan.md's table, read
    backwards): fp32 weights under bf16=True are amp-bf16; 16-bit weights are bf16 or fp16; a
    4-bit base runs under the trainer's autocast, in its compute dtype."""
    bf16 = bool(getattr(args, "bf16", False))
    fp16 = bool(getattr(args, "fp16", False))
    if quant.get("quant") in ("nf4", "fp4"):
        if bf16 or fp16:
            return "bf16" if bf16 else "fp16"
        compute = _dtype_name(
            bnb.get("bnb_4bit_compute_dtype")
            if isinstance(bnb, dict)
            else getattr(bnb, "bnb_4bit_compute_dtype", None)
        )
        return {"bfloat16": "bf16", "float16": "fp16"}.get(compute or "", "fp32")
    if model_dtype == "bfloat16":
        return "bf16"
    if model_dtype == "float16":
        return "fp16"
    if bf16:
        return "amp-bf16"
    if fp16:
        return "amp-fp16"
    return "tf32" if getattr(args, "tf32", None) else "fp32"


def _seq_of(args: Any) -> Optional[int]:
    """TRL's sequence length: SFTConfig's max_length (max_seq_length before TRL 0.20)."""
    for key in ("max_seq_length", "max_length"):
        value = getattr(args, key, None)
        if isinstance(value, int) and value > 0:
            return value
    return None


def _checkpointed(model: Any) -> bool:
    """Whether the script turned checkpointing on on the model itself (a PEFT model's base):
    transformers 5's is_activation_checkpointing, or is_gradient_checkpointing before it (read
    only where the first is missing: transformers 5 warns on it)."""
    get_base = getattr(model, "get_base_model", None)
    base = get_base() if callable(get_base) else model
    for name in ("is_activation_checkpointing", "is_gradient_checkpointing"):
        if hasattr(type(base), name):
            return bool(getattr(base, name))
    return False


def options_for(
    model: Any,
    training_args: Any,
    peft_config: Any = None,
    bnb_config: Any = None,
    *,
    seq: Optional[int] = None,
) -> Dict[str, Any]:
    """The keyword arguments of ``vrambench.plan`` for what a training script built: the model (a
    transformers model, its config, or what ``vrambench.plan`` takes), ``TrainingArguments`` (or
    TRL's ``SFTConfig``), and the ``LoraConfig`` and ``BitsAndBytesConfig`` when the model has not
    got them already. ``seq`` is TRL's ``max_length`` unless given."""
    if model is None:
        raise ValueError("plan_for: give the model (or its config)")
    options: Dict[str, Any] = {"model": model}
    config = api.config_dict(model) or (model if isinstance(model, dict) else {})

    if peft_config is None:
        peft_config = _peft_config_of(model)
    if bnb_config is None:
        bnb_config = config.get("quantization_config") or getattr(
            getattr(model, "config", None), "quantization_config", None
        )
    if bnb_config is not None:
        method = (
            bnb_config.get("quant_method")
            if isinstance(bnb_config, dict)
            else getattr(bnb_config, "quant_method", None)
        )
        method = str(getattr(method, "value", method) or "bitsandbytes")
        if method != "bitsandbytes":
            raise ValueError(
                f"plan_for: the model is quantised by {method}; vrambench models bitsandbytes"
            )
    quant = api.quant_options(bnb_config)
    options["peft_config"] = peft_config
    options["bnb_config"] = bnb_config

    model_dtype = _dtype_name(getattr(model, "dtype", None)) or _dtype_name(
        config.get("dtype") or config.get("torch_dtype")
    )
    options["dtype"] = _dtype_option(model_dtype, training_args, quant, bnb_config)

    # transformers' own optim names: the engine reads those it models (adamw_torch,
    # adamw_torch_fused, adamw_bnb_8bit, paged_adamw_32bit, ...) and refuses the rest.
    optim = getattr(training_args, "optim", None)
    if optim is not None:
        options["optimizer"] = str(getattr(optim, "value", optim))

    checkpointing = bool(getattr(training_args, "gradient_checkpointing", False)) or _checkpointed(
        model
    )
    options["recompute"] = "full" if checkpointing else "none"

    attention = config.get("_attn_implementation") or getattr(
        getattr(model, "config", None), "_attn_implementation", None
    )
    if attention is not None:
        options["attention"] = "flash" if attention in _FLASH else "eager"

    dropouts = [config[k] for k in _DROPOUTS if isinstance(config.get(k), (int, float))]
    if dropouts and max(dropouts) > 0:
        options["dropout"] = float(max(dropouts))

    micro = int(getattr(training_args, "per_device_train_batch_size", 8))
    accum = int(getattr(training_args, "gradient_accumulation_steps", 1))
    options["target_batch"] = micro * accum

    seq = seq if seq is not None else _seq_of(training_args)
    if seq is None:
        raise ValueError(
            "plan_for: the sequence length is not in the training arguments (TRL's max_length); "
            "give seq=N, the longest sequence a batch will hold"
        )
    options["seq"] = seq
    return options


def this_card(device: Any = None) -> Optional[int]:
    """The memory this process can plan for on its CUDA device, in bytes: the card's total less
    what other processes hold. None without CUDA, or where torch is not imported yet. This
    process's own tensors and cache are left in: they are what the plan counts."""
    torch = sys.modules.get("torch")
    if torch is None or not torch.cuda.is_available():
        return None
    index = getattr(device, "index", None)
    if index is None:
        index = torch.cuda.current_device()
    free, total = torch.cuda.mem_get_info(index)
    mine = torch.cuda.memory_reserved(index)
    others = _other_processes(index)
    if others is None:
        # Without NVML: what is used beyond this process's cache is taken as others', this
        # process's CUDA context with it, so that the plan errs on the small side.
        others = max(0, total - free - mine)
    return int(total - others)


def _other_processes(index: int) -> Optional[int]:
    """The bytes other processes hold on the device, from NVML (nvidia-ml-py), or None."""
    try:
        import os

        import pynvml

        pynvml.nvmlInit()
        handle = pynvml.nvmlDeviceGetHandleByIndex(index)
        me = os.getpid()
        return sum(
            p.usedGpuMemory or 0
            for p in pynvml.nvmlDeviceGetComputeRunningProcesses(handle)
            if p.pid != me
        )
    except Exception:  # no NVML, no permission, another index scheme: the caller falls back
        return None


def plan_for(
    model: Any,
    training_args: Any,
    peft_config: Any = None,
    bnb_config: Any = None,
    *,
    seq: Optional[int] = None,
    vram: Union[str, int, float, None] = None,
    **options: Any,
) -> Plan:
    """The plan for what a training script built (see ``options_for``): micro-batch and gradient
    accumulation for the arguments' effective batch, the longest sequence, the budget.

    ``vram``: a size ("24GiB"), or None for this card (``this_card``: its total less what other
    processes hold); without CUDA, give one. Other keyword arguments are ``vrambench.plan``'s
    (``safety_margin="2GiB"``, ``device="sim:rtx4090"``) and override what was read."""
    found = options_for(model, training_args, peft_config, bnb_config, seq=seq)
    found.update(options)
    found["vram"] = _capacity(vram, options, training_args)
    return api.plan(**found)


def _capacity(vram: Any, options: Dict[str, Any], training_args: Any) -> Any:
    """``vram`` as given, or this card's (this_card) where neither it nor a device is."""
    if vram is not None or "device" in options:
        return vram
    card = this_card(getattr(training_args, "device", None))
    if card is None:
        raise ValueError(
            "no CUDA device in this process to plan for; give vram='24GiB' (or "
            "device='sim:PROFILE')"
        )
    return f"{card}B"


class DoesNotFit(RuntimeError):
    """The configured micro-batch does not fit with the margin (``VramCallback(on_mismatch=
    "raise")``); ``plan`` holds what fits."""

    def __init__(self, message: str, plan: Plan):
        super().__init__(message)
        self.plan = plan


try:  # A callback is a TrainerCallback where transformers is installed.
    from transformers import TrainerCallback as _CallbackBase
except Exception:  # noqa: BLE001 - transformers absent or broken: plan_for still works
    _CallbackBase = object  # type: ignore[misc,assignment]


class VramCallback(_CallbackBase):  # type: ignore[misc,valid-type]
    """At ``on_train_begin``: whether ``per_device_train_batch_size`` with
    ``gradient_accumulation_steps`` fits this card with the safety margin, and what to set instead
    for the same effective batch. It warns by default (``on_mismatch="raise"`` raises
    ``DoesNotFit``, ``"log"`` only logs) and never changes the arguments.

    ``Trainer(..., callbacks=[VramCallback(seq=2048)])``; the other keyword arguments are
    ``plan_for``'s (``vram``, ``safety_margin``, ``peft_config``, ``bnb_config``). Afterwards
    ``fits`` and ``message`` hold the answer, ``configured`` the plan of the micro-batch as set
    (searched up to it, with its accumulation) and ``plan`` the plan for the effective batch.
    """

    def __init__(
        self,
        *,
        seq: Optional[int] = None,
        vram: Union[str, int, float, None] = None,
        on_mismatch: str = "warn",
        peft_config: Any = None,
        bnb_config: Any = None,
        **options: Any,
    ):
        if on_mismatch not in ("warn", "raise", "log"):
            raise ValueError(f"on_mismatch: warn, raise or log, got {on_mismatch!r}")
        self.seq = seq
        self.vram = vram
        self.on_mismatch = on_mismatch
        self.peft_config = peft_config
        self.bnb_config = bnb_config
        self.options = options
        self.fits: Optional[bool] = None
        self.message: Optional[str] = None
        self.configured: Optional[Plan] = None
        self.plan: Optional[Plan] = None

    def on_train_begin(self, args, state, control, model=None, **kwargs):
        try:
            self.check(model, args)
        except ValueError as e:
            # A model or recipe the engine does not model: say so, never stop the run for it.
            self.fits, self.message = None, f"vrambench: cannot check: {e}"
            self._say(self.message, warning=self.on_mismatch != "log")
            return control
        if self.fits:
            log.info("%s", self.message)
        elif self.on_mismatch == "raise":
            raise DoesNotFit(self.message, self.plan)
        else:
            self._say(self.message, warning=self.on_mismatch == "warn")
        return control

    def check(self, model: Any, args: Any) -> bool:
        """Plans the configured micro-batch and the effective batch; sets ``fits``, ``message``,
        ``configured`` and ``plan``, and returns ``fits``."""
        micro = int(args.per_device_train_batch_size)
        accum = int(getattr(args, "gradient_accumulation_steps", 1))
        found = options_for(model, args, self.peft_config, self.bnb_config, seq=self.seq)
        found.update(self.options)
        found["vram"] = _capacity(self.vram, self.options, args)
        # The micro-batch as set: searched up to itself, with the accumulation it runs with
        # (gradients kept across micro-steps).
        self.configured = api.plan(**dict(found, target_batch=None, grad_accum=accum, max_batch=micro))
        self.plan = api.plan(**found)
        self.fits = self.configured.max_micro_batch >= micro
        c, p = self.configured, self.plan
        where = (
            f"{c.device} less the {_gib(c.safety_margin_bytes)} margin, seq {c.seq}"
        )
        as_set = f"per_device_train_batch_size={micro} with gradient_accumulation_steps={accum}"
        if self.fits:
            self.message = (
                f"vrambench: {as_set} fits {where}: peak {_gib(c.budget.device_peak_bytes)} of "
                f"{_gib(c.planning_capacity_bytes)} planned"
            )
            if p.micro_batch > micro:
                self.message += (
                    f"; {p.micro_batch} x {p.grad_accum} would fit too, for the same effective "
                    f"batch {p.effective_batch}"
                )
            return True
        if p.micro_batch > 0:
            instead = (
                f"set per_device_train_batch_size={p.micro_batch}, "
                f"gradient_accumulation_steps={p.grad_accum} for the same effective batch "
                f"{p.effective_batch}"
            )
            if p.plan.near is not None:
                n = p.plan.near
                instead += (
                    f" (or {n.micro_batch} x {n.grad_accum}, an effective batch of "
                    f"{n.effective_batch})"
                )
        else:
            best = p.alternatives[0] if p.alternatives else None
            instead = "micro-batch 1 does not fit either" + (
                f"; the change that saves most: {best.change} ({best.flags})" if best else ""
            )
        self.message = (
            f"vrambench: {as_set} does not fit {where}: the largest micro-batch that does is "
            f"{c.max_micro_batch}; {instead}"
        )
        return False

    @staticmethod
    def _say(message: str, warning: bool) -> None:
        if warning:
            warnings.warn(message, stacklevel=3)
        else:
            log.warning("%s", message)


def _gib(n: int) -> str:
    return f"{n / (1 << 30):.2f} GiB"
