"""The paper's reported numbers (arXiv 2505.23735 v1, transcription notes in docs/deviations.md).

The numbers live in `paper_data/*.tsv`, one file per table, as printed (a header `model<TAB>column...`, one row per
model keyed by our preset names); baseline rows the paper copied from other papers are included as printed. This
module loads them into tuples of numbers and adds what is mapping rather than data.
"""

from __future__ import annotations

from pathlib import Path

_DATA = Path(__file__).with_name("paper_data")


def _number(text: str) -> int | float:
    return int(text) if text.lstrip("-").isdigit() else float(text)


def load_table(name: str, root: Path = _DATA) -> tuple[tuple[str, ...], dict[str, tuple[int | float, ...]]]:
    """`<root>/<name>.tsv` as (columns, {model: values}); a malformed row names the file and line."""
    path = root / f"{name}.tsv"
    header, *lines = path.read_text().splitlines()
    columns = tuple(header.split("\t")[1:])
    rows: dict[str, tuple[int | float, ...]] = {}
    for i, line in enumerate(lines, start=2):
        model, *cells = line.split("\t")
        if len(cells) != len(columns):
            raise ValueError(f"{path}:{i}: {len(cells)} values for {len(columns)} columns")
        rows[model] = tuple(_number(c) for c in cells)
    return columns, rows


# Table 2: 760M parameters / 30B tokens, and 1.3B / 100B; Table 8 (App. F): 340M / 15B (the rows of our presets).
LM_COLUMNS, TABLE2_760M = load_table("table2_760m")
TABLE2_1_3B = load_table("table2_1_3b")[1]
TABLE8_340M = load_table("table8_340m")[1]
# Table 6: Atlas ablations at 760M, (LM ppl = (wiki + lmb) / 2, common-sense accuracy).
TABLE6_ABLATIONS = load_table("table6_ablations")[1]
# Table 3: S-NIAH (RULER) accuracy; PK = passkey (niah_single_1), N = number (2), W = uuid/word (3).
NIAH_COLUMNS, TABLE3_NIAH = load_table("table3_niah")
# Table 4: MAD synthetic benchmark accuracy.
MAD_COLUMNS, TABLE4_MAD = load_table("table4_mad")

# Which Table 6 row a cell of each ablation axis speaks to: (settings the cell must have, row); the first match
# wins. poly_degree=1 is no row: it keeps the constant feature and a learnable a_1, while the paper's "w/o
# polynomial map" is phi = identity.
ABLATION_ROWS = {
    "gated_mlp": (({"memory": "mlp"}, "atlas"), ({"memory": "gated_mlp"}, "gated_mlp (Atlas++)"),
                  ({"memory": "linear"}, "linear memory")),
    "optimizer": (({"optimizer": "muon"}, "atlas"), ({"optimizer": "gd"}, "w/o muon (OmegaNet)")),
    "window": (({"window": "1"}, "c = 1"),),
    "poly_degree": (({"feature_map": "identity"}, "w/o polynomial map"),),
}  # fmt: skip

# Section 6 / Fig. 6 (curves only): the five learnability streams by loss, easiest first ("roughly").
LEARNABILITY_ORDER = (1, 4, 2, 3, 5)
