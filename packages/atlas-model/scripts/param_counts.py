"""Print a markdown table of the parameter count of every preset at every size.

    python packages/atlas-model/scripts/param_counts.py [--sizes 170M 340M] [--presets atlas swa] [--non-embedding]

Models are built on the meta device, so even the 1.3B column takes seconds and no memory.
"""

import argparse

import atlas_model
from atlas_model.stats import parameter_count

# The paper's names for its sizes (Table 7); the CPU sizes have none.
NOMINAL = {"170M": 170e6, "340M": 340e6, "760M": 760e6, "1.3B": 1.3e9}


def _fmt(n: float) -> str:
    if n >= 1e9:
        return f"{n / 1e9:.2f}B"
    if n >= 1e6:
        return f"{n / 1e6:.1f}M"
    return f"{n / 1e3:.1f}K"


def table(presets: list[str], sizes: list[str], embeddings: bool = True) -> str:
    """Markdown table: one row per preset, one column per size; paper sizes show the deviation from nominal."""
    lines = ["| preset | " + " | ".join(sizes) + " |", "|---|" + "---:|" * len(sizes)]
    for name in presets:
        cells = []
        for size in sizes:
            n = parameter_count(atlas_model.AtlasConfig.from_preset(name, size), embeddings=embeddings)
            cell = _fmt(n)
            if embeddings and size in NOMINAL:
                cell += f" ({100 * (n / NOMINAL[size] - 1):+.0f}%)"
            cells.append(cell)
        lines.append(f"| {name} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--presets", nargs="+", default=list(atlas_model.PRESETS), choices=atlas_model.PRESETS)
    parser.add_argument("--sizes", nargs="+", default=list(atlas_model.SIZES), choices=atlas_model.SIZES)
    parser.add_argument("--non-embedding", action="store_true", help="leave out the embedding and the LM head")
    args = parser.parse_args(argv)
    print(table(args.presets, args.sizes, embeddings=not args.non_embedding))


if __name__ == "__main__":
    main()
