"""Ablation tables (config/ablations/*.tsv) -> cells: a run name and the model overrides of every row.

A column names a model setting: a MemoryConfig field (window, poly_degree, memory, ...) goes into the `memory`
overrides, any other AtlasConfig field (use_gamma_gate, eta_max, ...) is a top-level override; anything else is an
error that names the table, the row and the key. An empty cell keeps the base's value and stays out of the run
name, so a new column leaves the run names (and the finished runs) of the existing rows as they were.

Plain Python, no snakemake: the workflow imports it at DAG build and the tests import it directly.
"""

from __future__ import annotations

import csv
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

# What the workflow itself decides (preset and size from the config, vocabulary from the data): a cell that set
# them would train something other than its run name says.
RESERVED = frozenset({"preset", "size", "vocab_size", "memory"})
_VALUE = re.compile(r"[A-Za-z0-9_.\-]+")  # what the `run` wildcard admits


class AblationTableError(ValueError):
    """An ablation table that cannot become cells; the message names the file, the row and the key."""


class Cells(dict):
    """Run name -> overrides, in table order; `where[run]` names the row ('config/ablations/window.tsv, row 3
    (line 4)') for errors found later, when the package validates the cell's values; `values[run]` is the row as
    written ({'window': '4'}), which the run carries as tags so that reports never parse it back from the name."""

    def __init__(self) -> None:
        super().__init__()
        self.where: dict[str, str] = {}
        self.values: dict[str, dict[str, str]] = {}


@dataclass(frozen=True)
class ModelFields:
    memory: frozenset[str]
    model: frozenset[str]

    @classmethod
    def from_classes(cls) -> ModelFields:
        """The settings a cell may name, from the classes that check them: `MemoryConfig`'s fields and the fields
        `AtlasConfig` declares itself (not the Hugging Face base's). The DAG build imports atlas_model anyway to
        validate every run (config_checks.py), so reading the classes costs nothing extra."""
        from dataclasses import fields

        from atlas_kernels import MemoryConfig
        from atlas_model import AtlasConfig

        return cls(
            memory=frozenset(f.name for f in fields(MemoryConfig)),
            model=frozenset(AtlasConfig.__annotations__) - RESERVED,
        )

    def section(self, key: str) -> str | None:
        """'memory' (a MemoryConfig field, which wins the one shared name), 'model', or None (unknown)."""
        if key in self.memory:
            return "memory"
        return "model" if key in self.model else None


def typed(text: str) -> Any:
    """A cell's text as the JSON value the model config expects: bool, int, float, else the string."""
    if text.lower() in ("true", "false"):
        return text.lower() == "true"
    for cast in (int, float):
        try:
            return cast(text)
        except ValueError:
            pass
    return text


def read_table(path: Path, fields: ModelFields, shown: str | None = None) -> Cells:
    """Run name -> AtlasConfig overrides ({'memory': {...}, top-level fields}) of every row, in table order."""
    shown = shown or str(path)
    with open(path, newline="") as f:
        rows = list(csv.reader(f, delimiter="\t"))
    if not rows or not any(h.strip() for h in rows[0]):
        raise AblationTableError(f"{shown}: no header row")
    header = [h.strip() for h in rows[0]]
    first_use: dict[str, int] = {}  # a bad key is reported at the first row that sets it
    for line, row in enumerate(rows[1:], start=2):
        for key, text in zip(header, row):
            if text.strip():
                first_use.setdefault(key, line)
    for key in header:
        if fields.section(key) is None:
            where = f"row {first_use[key] - 1} (line {first_use[key]})" if key in first_use else "header (line 1)"
            raise AblationTableError(
                f"{shown}, {where}: key {key!r} is not a model setting (neither a MemoryConfig nor an AtlasConfig "
                f"field{'; the workflow sets it' if key in RESERVED else ''})"
            )
    cells = Cells()
    seen: dict[str, int] = {}
    for line, row in enumerate(rows[1:], start=2):
        if not any(c.strip() for c in row):
            continue  # a blank line
        where = f"{shown}, row {line - 1} (line {line})"
        if len(row) > len(header):
            raise AblationTableError(f"{where}: {len(row)} cells for {len(header)} columns")
        values = {k: t.strip() for k, t in zip(header, row) if t.strip()}
        for key, text in values.items():
            if not _VALUE.fullmatch(text):
                raise AblationTableError(f"{where}: key {key!r}: value {text!r} has characters a run name cannot hold")
        name = "__".join(f"{k}~{t}" for k, t in values.items())
        if name in seen:
            raise AblationTableError(f"{where}: the same cell as line {seen[name]} ({name})")
        seen[name] = line
        cells.values[name] = values
        overrides: dict[str, Any] = {}
        for key, text in values.items():
            if fields.section(key) == "memory":
                overrides.setdefault("memory", {})[key] = typed(text)
            else:
                overrides[key] = typed(text)
        cells[name] = overrides
        cells.where[name] = where
    if not cells:
        raise AblationTableError(f"{shown}: no rows")
    return cells
