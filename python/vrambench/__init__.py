"""vrambench: the largest training batch that fits on a GPU, and the trainer settings for it.

The same engine as the ``vrambench`` program, as Python calls::

    import vrambench
    p = vrambench.plan("llama3.2-1b", finetune="qlora", vram="24GiB", seq=2048, target_batch=16)
    p.micro_batch, p.grad_accum, p.max_seq, p.budget["activations"]

``estimate``, ``search`` and ``plan`` take the program's options as keyword arguments
(``lora_rank=16`` is ``--lora-rank 16``); ``vrambench.hf`` plans from what a training script built
(model, TrainingArguments, LoraConfig, BitsAndBytesConfig) and checks a run at its start.
"""

from . import _engine
from .api import command_line, estimate, plan, run, search
from .results import (
    Alternative,
    Budget,
    BudgetLine,
    Column,
    LongestSeq,
    MicroBatchPlan,
    Near,
    Plan,
    PlanTable,
    Table,
)
from ._cli import main

__version__ = _engine.version

__all__ = [
    "Alternative",
    "Budget",
    "BudgetLine",
    "Column",
    "LongestSeq",
    "MicroBatchPlan",
    "Near",
    "Plan",
    "PlanTable",
    "Table",
    "command_line",
    "estimate",
    "main",
    "plan",
    "run",
    "search",
]
