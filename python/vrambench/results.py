"""What the commands return, as typed values: the JSON the program writes, field for field.

A plan is ``vrambench plan --emit json`` (``Plan``; a sweep's plans are a ``PlanTable``); an
estimate or a search is the JSON file it writes under ``--out`` (``Table``, one row a dataclass
whose fields are the file's columns). Sizes are bytes, shares and errors fractions, as in the JSON.
"""

from __future__ import annotations

import dataclasses
import functools
import typing
from dataclasses import dataclass
from typing import Any, Callable, Iterator, Optional, Sequence, Tuple

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
    "SeqTrial",
    "Table",
    "Trial",
]


def _from_json(cls: Any, value: Any) -> Any:
    """``value`` (parsed JSON) as ``cls``: a dataclass from an object with exactly its fields, a
    tuple from a list, None where Optional allows it. A key the dataclass lacks, or a field the
    object lacks, is an error: the program and this package are built together, and a test holds
    the two to the same fields."""
    origin = typing.get_origin(cls)
    if origin is typing.Union:
        args = [a for a in typing.get_args(cls) if a is not type(None)]
        if value is None:
            return None
        return _from_json(args[0], value)
    if origin is tuple:
        (item,) = [a for a in typing.get_args(cls) if a is not Ellipsis]
        return tuple(_from_json(item, v) for v in value)
    if dataclasses.is_dataclass(cls):
        hints = _hints(cls)
        names = {f.name for f in dataclasses.fields(cls) if f.init}
        if set(value) != names:
            raise RuntimeError(
                f"vrambench: the engine's {cls.__name__} has fields {sorted(value)}, the package "
                f"{sorted(names)}: the module and the package are of different builds"
            )
        return cls(**{k: _from_json(hints[k], v) for k, v in value.items()})
    if cls is float and isinstance(value, int):
        return float(value)
    return value


@functools.lru_cache(maxsize=None)
def _hints(cls: type) -> dict:
    return typing.get_type_hints(cls)


@dataclass(frozen=True)
class Near:
    """The near alternative: the largest micro-batch at its own effective batch (never planned)."""

    micro_batch: int
    grad_accum: int
    effective_batch: int


@dataclass(frozen=True)
class MicroBatchPlan:
    """The micro-batch and gradient accumulation for the target batch (the JSON's ``plan``)."""

    max_micro_batch: int
    micro_batch: int
    grad_accum: int
    effective_batch: int
    near: Optional[Near]


@dataclass(frozen=True)
class Trial:
    batch: int
    fit: bool


@dataclass(frozen=True)
class SeqTrial:
    seq: int
    fit: bool


@dataclass(frozen=True)
class LongestSeq:
    """The longest sequence (a multiple of 64) that fits at micro-batch 1."""

    micro_batch: int
    max_seq: int
    est_max_seq: int
    hit_limit: bool
    trials: Tuple[SeqTrial, ...]


@dataclass(frozen=True)
class BudgetLine:
    component: str
    title: str
    bytes: int
    on_device: bool
    share_of_capacity: float


@dataclass(frozen=True)
class Budget:
    """Where the memory of the step goes at its peak, at the planned micro-batch."""

    micro_batch: int
    fits: bool
    device_peak_bytes: int
    capacity_bytes: int
    lines: Tuple[BudgetLine, ...]

    def __getitem__(self, component: str) -> int:
        """The bytes of one line by its component: ``budget["activations"]``."""
        for line in self.lines:
            if line.component == component:
                return line.bytes
        raise KeyError(component)

    def to_pandas(self):
        """The lines as a DataFrame (needs pandas)."""
        import pandas

        return pandas.DataFrame([dataclasses.asdict(line) for line in self.lines])


@dataclass(frozen=True)
class Alternative:
    """One change to the recipe, measured on sim at the smallest micro-batch that did not fit."""

    change: str
    flags: str
    peak_bytes: int
    saved_bytes: int
    max_micro_batch: int
    plan: Optional[MicroBatchPlan]


@dataclass(frozen=True)
class Plan:
    """``vrambench plan --emit json``: the trainer settings for one configuration.

    ``micro_batch``, ``grad_accum``, ``effective_batch`` and ``max_seq`` are the planned settings
    (``plan`` and ``longest_seq`` hold them with the rest); ``budget`` is the memory at the peak.
    """

    config: dict
    recipe: str
    framework: str
    device: str
    capacity_bytes: int
    safety_margin_bytes: int
    planning_capacity_bytes: int
    cuda_context_bytes: int
    seq: int
    fits: bool
    target_batch: Optional[int]
    plan: MicroBatchPlan
    max_micro_batch: int
    max_micro_batch_whole_capacity: int
    est_max_micro_batch: int
    trials: Tuple[Trial, ...]
    longest_seq: LongestSeq
    budget: Budget
    alternatives_compared_at_micro_batch: int
    alternatives_compared_peak_bytes: int
    alternatives: Tuple[Alternative, ...]
    summary: str
    # Prints the same plan in another form (--emit text, hf, axolotl): the call that made it, again.
    _emit: Optional[Callable[[str], str]] = dataclasses.field(
        default=None, repr=False, compare=False, init=False
    )

    @property
    def micro_batch(self) -> int:
        """per_device_train_batch_size (0 when nothing fits)."""
        return self.plan.micro_batch

    @property
    def grad_accum(self) -> int:
        """gradient_accumulation_steps (0 when nothing fits)."""
        return self.plan.grad_accum

    @property
    def effective_batch(self) -> int:
        return self.plan.effective_batch

    @property
    def max_seq(self) -> int:
        """The longest sequence that fits at micro-batch 1 (a multiple of 64)."""
        return self.longest_seq.max_seq

    def text(self) -> str:
        """The plan as the program prints it (``--emit text``: settings, budget, changes)."""
        return self._emit_form("text")

    def hf(self) -> str:
        """Python for transformers, PEFT and bitsandbytes (``--emit hf``)."""
        return self._emit_form("hf")

    def accelerate(self) -> str:
        """An accelerate config file for the plan's ``gpus`` and ``strategy`` (``--emit
        accelerate``)."""
        return self._emit_form("accelerate")

    def deepspeed(self) -> str:
        """The ZeRO JSON of a zero1/zero2/zero3 plan (``--emit deepspeed``)."""
        return self._emit_form("deepspeed")

    def axolotl(self) -> str:
        """Axolotl's YAML keys (``--emit axolotl``)."""
        return self._emit_form("axolotl")

    def _emit_form(self, form: str) -> str:
        if self._emit is None:
            raise ValueError("this plan was read from JSON: run `vrambench plan --emit " + form + "`")
        return self._emit(form)

    def __str__(self) -> str:
        """The recipe, the settings in a line, and the program's summary line."""
        c = self.plan
        if c.micro_batch == 0:
            settings = "micro-batch 1 does not fit"
            if self.alternatives:
                best = self.alternatives[0]
                settings += (
                    f"; the change that saves most: {best.change} ({best.flags}), micro-batch up "
                    f"to {best.max_micro_batch}"
                )
        elif self.target_batch is None:
            settings = f"micro-batch up to {c.max_micro_batch}"
        else:
            settings = (
                f"micro-batch {c.micro_batch} x grad-accum {c.grad_accum} = {c.effective_batch} "
                f"(the largest micro-batch that fits: {c.max_micro_batch})"
            )
            if c.near is not None:
                settings += (
                    f"; near: {c.near.micro_batch} x {c.near.grad_accum} = "
                    f"{c.near.effective_batch}"
                )
        return "\n".join(
            [
                f"Plan for {self.recipe}",
                f"on {self.device}: {settings}; longest sequence at micro-batch 1: {self.max_seq}",
                self.summary,
            ]
        )


@dataclass(frozen=True)
class PlanTable(Sequence[Plan]):
    """A sweep's plans (``plan --sweep ... --emit json``), in the sweep's order."""

    plans: Tuple[Plan, ...]
    varying: Tuple[str, ...]

    def __len__(self) -> int:
        return len(self.plans)

    def __getitem__(self, i):  # type: ignore[override]
        return self.plans[i]

    def __iter__(self) -> Iterator[Plan]:
        return iter(self.plans)

    def to_pandas(self):
        """One row per plan: the swept fields, then the settings, the longest sequence, the peak
        and what is left free (needs pandas)."""
        import pandas

        rows = []
        for p in self.plans:
            row = {field: p.config.get(field, p.config.get(f"{field}_bytes")) for field in self.varying}
            row.update(
                max_micro_batch=p.max_micro_batch,
                micro_batch=p.micro_batch,
                grad_accum=p.grad_accum,
                effective_batch=p.effective_batch,
                max_seq=p.max_seq,
                peak_bytes=p.budget.device_peak_bytes,
                free_bytes=p.budget["free"],
                fits=p.fits,
                best_change=p.alternatives[0].change if p.alternatives else None,
            )
            rows.append(row)
        return pandas.DataFrame(rows)

    def __str__(self) -> str:
        return "\n".join(p.summary for p in self.plans)


@dataclass(frozen=True)
class Column:
    """A column of a result table: its JSON key, its title in the Markdown table, its kind
    (integer, bytes, percent, number, text, flag)."""

    key: str
    title: str
    kind: str


_KIND_TYPES = {
    "integer": int,
    "bytes": int,
    "percent": float,
    "number": float,
    "text": str,
    "flag": bool,
}


@functools.lru_cache(maxsize=None)
def _row_class(command: str, columns: Tuple[Column, ...]) -> type:
    """A frozen dataclass for the rows of `columns`: each a field named after its key ('-' as
    '_': a swept ``lora-rank`` is ``lora_rank``), typed by its kind, None where a cell is empty."""
    name = "".join(part.capitalize() for part in command.replace("-", " ").split()) + "Row"
    fields = [
        (c.key.replace("-", "_"), Optional[_KIND_TYPES.get(c.kind, object)]) for c in columns
    ]
    return dataclasses.make_dataclass(name, fields, frozen=True)


@dataclass(frozen=True)
class Table(Sequence[Any]):
    """An estimate or a search: the rows of the JSON file the command writes, and what it printed.

    ``rows[i]`` is a dataclass with one field per column (``row.sim_max_batch``); ``summary`` is the
    file's summary object (``summary["summary"]`` the program's last line; a search's per-row
    ``details`` are there), ``provenance`` where and how it ran, ``text`` the Markdown table and
    summary line as the program prints them.
    """

    command: str
    columns: Tuple[Column, ...]
    rows: Tuple[Any, ...]
    summary: dict
    provenance: dict
    text: str = dataclasses.field(repr=False)

    @classmethod
    def from_json(cls, command: str, result: dict, text: str) -> "Table":
        columns = tuple(Column(**c) for c in result["columns"])
        row_class = _row_class(command, columns)
        rows = tuple(
            row_class(**{c.key.replace("-", "_"): row.get(c.key) for c in columns})
            for row in result["rows"]
        )
        return cls(command, columns, rows, result["summary"], result["provenance"], text)

    def __len__(self) -> int:
        return len(self.rows)

    def __getitem__(self, i):  # type: ignore[override]
        return self.rows[i]

    def __iter__(self) -> Iterator[Any]:
        return iter(self.rows)

    def to_pandas(self):
        """The rows as a DataFrame whose columns are the JSON's keys, as the CSV has them (needs
        pandas)."""
        import pandas

        return pandas.DataFrame(
            [[getattr(r, c.key.replace("-", "_")) for c in self.columns] for r in self.rows],
            columns=[c.key for c in self.columns],
        )

    def __str__(self) -> str:
        return self.text


def plan_from_json(result: dict):
    """A plan, or a sweep's plans, from ``plan --emit json``."""
    if "plans" in result:
        return PlanTable(tuple(_from_json(Plan, p) for p in result["plans"]), tuple(result["varying"]))
    return _from_json(Plan, result)
