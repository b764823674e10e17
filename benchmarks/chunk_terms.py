"""The per-chunk loop with every full chunk's state-independent terms built as one batch beforehand
(`atlas_kernels.ops.memory.chunk_terms`) against the loop building them chunk by chunk: kernels per chunk (forward,
backward) and CPU time of one forward + backward.

    .venv/bin/python benchmarks/chunk_terms.py --out benchmarks/chunk_terms.md

Rows: the memories of the model presets at the 340M shape (16 heads of dim 64, chunk b = 16) that run the per-chunk
loop and that the batched terms cover (a finite window, identity or polynomial features, not the exact delta rule),
without chunk checkpointing. The Muon presets are left out unless named with --only: they checkpoint their chunks
in training, where the terms stay per chunk. Kernels and time as `linear_scan.py` counts and times them (its
docstring), the two paths alternating in one process.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))
for pkg in ("atlas-kernels", "atlas-model"):
    sys.path.insert(0, str(ROOT / "packages" / pkg / "src"))

from linear_scan import D, H, measure, run_header, table  # noqa: E402
from marked_block import write_block  # noqa: E402
from op_counts import preset_memories  # noqa: E402

from atlas_kernels import MemoryConfig  # noqa: E402
from atlas_kernels.ops.memory.chunk_terms import batched_terms_apply  # noqa: E402
from atlas_kernels.ops.memory.linear_scan import batch_by_default, batched_linear  # noqa: E402

# checkpoint off in both: the batched terms apply to the op without chunk checkpoints only
MODES = {False: {"batch_terms": False, "checkpoint": False}, True: {"batch_terms": True, "checkpoint": False}}


def rows(only: list[str] | None = None) -> list[tuple[str, MemoryConfig]]:
    out = []
    for lab, (names, cfg, heads, dim) in preset_memories("340M").items():
        if (only and not any(s in lab for s in only)) or (not only and cfg.optimizer == "muon"):
            continue
        if not batched_terms_apply(cfg) or (batch_by_default(cfg) and batched_linear(cfg, dim)):
            continue  # the exp features and the exact delta rule keep the loop; linear_scan covers the rest
        assert (heads, dim) == (H, D), (lab, heads, dim)
        out.append((f"{lab} ({', '.join(names)})", cfg))
    return out


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--reps", type=int, default=3, help="timed calls per path and row (median; default 3)")
    p.add_argument("--only", nargs="*", help="labels (substrings) of the memories to run")
    p.add_argument("--out", help="write the table into this markdown file (the block between markers)")
    args = p.parse_args(argv)
    body = table(measure(rows(args.only), args.reps, MODES), after="batched terms")
    print(body)
    if args.out:
        header = run_header("chunk_terms.py", argv)
        write_block(args.out, "chunk-terms", f"{header}\n\n{body}", "benchmarks/chunk_terms.py")


if __name__ == "__main__":
    main()
