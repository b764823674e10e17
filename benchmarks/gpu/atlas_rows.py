"""The Atlas rows of `kernels_gpu.py` (`--only atlas`: Atlas's Muon paths beside the GD twin at 760M, then 340M).

    python benchmarks/gpu/atlas_rows.py --budget 45 --out atlas.md [--quick]   # = kernels_gpu.py --only atlas ...
    python benchmarks/gpu/atlas_rows.py --smoke --budget 45 --out atlas.md     # CPU, 2 heads of 8, T = 21, 2 rows

The arguments go to `kernels_gpu.py` unchanged. `--smoke` there runs the rows on CPU at its tiny shape (a minute
of CPU); here the shape shrinks further to two chunks of 16 tokens and the rows to the GD twin and the default Muon
path (seconds), which is all a rehearsal of the GPU call needs: the rows, their order and the file they land in.
"""

from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "benchmarks"))


def main(argv: list[str]) -> int:
    import kernels_gpu
    import kernels_gpu_cases as cases

    full_smoke = cases.smoke_setup

    def smaller() -> None:
        full_smoke()
        cases.MODELS = {"tiny": (32, 2, 8)}
        cases.ATLAS_SHAPES = {"tiny": (1, 21)}
        # the twin and the default Muon path: the ratio column's plumbing, at a third of the rows' CPU time
        cases.ATLAS_CONFIGS = dict(list(cases.ATLAS_CONFIGS.items())[:2])

    cases.smoke_setup = smaller
    sys.argv = ["benchmarks/kernels_gpu.py", "--only", "atlas", *argv]
    return kernels_gpu.main()


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
