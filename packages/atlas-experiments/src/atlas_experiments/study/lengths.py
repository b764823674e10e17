"""MQAR accuracy by sequence length in the study report, for protocols that score settings no model trains on
(`test_settings`, e.g. the length-extrapolation proxy): one figure per such protocol, accuracy against setting (by
pairs, then length, so each trained setting stands beside its longer test-only one) with the trained settings shaded,
one colour per arm, a thin line per finished seed and a thick line for the arm's mean; hollow markers, the mean over
the far queries of each test-only setting (those farther from their key than any query in training, `acc_far/...`,
when the run recorded them). Beside it a table of each arm's mean (min - max) per setting.

The numbers are those the verdicts read (`acc/<arm>/d=<width>/len=<T>/pairs=<P>` of each finished job); the figure
shows where along the lengths the arms part. It judges nothing: a claim's cell and gate are its registration's.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from statistics import mean

from atlas_experiments.plotting import pyplot, save_figure_atomic
from atlas_experiments.study import gates
from atlas_experiments.study.plan import Job
from atlas_experiments.study.results import ResultError, load

Setting = tuple[int, int]  # (sequence length T, key-value pairs)
# protocol -> {"trained": [...], "test": [...], "arms": arm -> seed -> {"acc": {setting: x}, "far": {setting: x}}}
Lengths = dict[str, dict]


def _cell(setting: Setting) -> str:
    return f"len={setting[0]}/pairs={setting[1]}"


def mqar_lengths(jobs: Sequence[Job], root: str | Path) -> Lengths:
    """Per-setting accuracies of every finished job of the MQAR protocols among `jobs` that have test-only settings."""
    out: Lengths = {}
    for job in jobs:
        protocol = job.protocol
        if protocol.task != "mqar" or job.arm is None or not protocol.args.get("test_settings"):
            continue
        try:
            metrics = load(job, root).get("metrics", {})
        except (FileNotFoundError, ResultError):
            continue
        mqar = gates.mqar_protocol(protocol.args)
        trained, test = list(mqar.settings), list(mqar.test_settings)
        prefix = f"{job.arm.name}/d={mqar.widths[0]}"  # a study protocol runs one width
        acc = {s: metrics[f"acc/{prefix}/{_cell(s)}"] for s in trained + test if f"acc/{prefix}/{_cell(s)}" in metrics}
        if not acc:
            continue
        far = {s: metrics[f"acc_far/{prefix}/{_cell(s)}"] for s in test if f"acc_far/{prefix}/{_cell(s)}" in metrics}
        entry = out.setdefault(protocol.name, {"trained": trained, "test": test, "arms": {}})
        entry["arms"].setdefault(job.arm.name, {})[job.seed] = {"acc": acc, "far": far}
    return out


def _ordered(entry: Mapping) -> list[Setting]:
    return sorted(entry["trained"] + entry["test"], key=lambda s: (s[1], s[0]))


def _label(setting: Setting, trained: Sequence[Setting]) -> str:
    return f"T {setting[0]} x {setting[1]}\n({'trained' if setting in trained else 'test only'})"


def lengths_figure(protocol: str, entry: Mapping, path: str | Path) -> Path:
    plt = pyplot()
    settings = _ordered(entry)
    xs = {s: i for i, s in enumerate(settings)}
    fig, ax = plt.subplots(figsize=(7.5, 4.2))
    colours = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    for i in (xs[s] for s in entry["trained"]):
        ax.axvspan(i - 0.4, i + 0.4, color="0.9", zorder=0)
    for k, (arm, seeds) in enumerate(sorted(entry["arms"].items())):
        colour = colours[k % len(colours)]
        for run in seeds.values():
            points = sorted((xs[s], v) for s, v in run["acc"].items())
            ax.plot(*zip(*points), color=colour, lw=0.8, alpha=0.45)
        means = [(xs[s], mean(r["acc"][s] for r in seeds.values() if s in r["acc"])) for s in settings
                 if any(s in r["acc"] for r in seeds.values())]  # fmt: skip
        ax.plot(*zip(*means), color=colour, lw=2.2, marker="o", label=f"{arm} ({len(seeds)} seeds)")
        far = [(xs[s], mean(r["far"][s] for r in seeds.values() if s in r["far"])) for s in entry["test"]
               if any(s in r["far"] for r in seeds.values())]  # fmt: skip
        if far:
            ax.plot(*zip(*sorted(far)), color=colour, ls="none", marker="o", ms=8, mfc="white",
                    label=f"{arm}, far queries (mean)")  # fmt: skip
    ax.set_xticks(range(len(settings)), [_label(s, entry["trained"]) for s in settings], fontsize=8)
    ax.set_ylim(-0.02, 1.02)
    ax.set_ylabel("held-out accuracy")
    ax.set_title(f"MQAR accuracy by length, {protocol} (finished jobs; shaded: trained settings)", fontsize=9)
    ax.grid(alpha=0.3, axis="y")
    ax.legend(fontsize=7, loc="center left", bbox_to_anchor=(1.0, 0.5))
    fig.tight_layout()
    return save_figure_atomic(fig, path)


def _summary(values: Sequence[float]) -> str:
    return f"{mean(values):.3f} ({min(values):.3f} - {max(values):.3f})" if values else "-"


def lengths_section(lengths: Lengths, out_dir: str | Path) -> str:
    """The report's section on accuracy by length (figures written into `out_dir`); empty without a finished job."""
    if not lengths:
        return ""
    out = ["## MQAR accuracy by length (finished jobs; they judge nothing)\n"]
    for protocol, entry in sorted(lengths.items()):
        name = f"lengths_{protocol}.png"
        lengths_figure(protocol, entry, Path(out_dir) / name)
        settings = _ordered(entry)
        heads = [f"T {s[0]} x {s[1]} ({'trained' if s in entry['trained'] else 'test only'})" for s in settings]
        heads += [f"far queries at T {s[0]} x {s[1]}" for s in entry["test"]]
        out += [f"### {protocol}\n", "| arm | seeds | " + " | ".join(heads) + " |", "|---" * (len(heads) + 2) + "|"]
        for arm, seeds in sorted(entry["arms"].items()):
            cells = [_summary([r["acc"][s] for r in seeds.values() if s in r["acc"]]) for s in settings]
            cells += [_summary([r["far"][s] for r in seeds.values() if s in r["far"]]) for s in entry["test"]]
            out.append(f"| {arm} | {len(seeds)} | " + " | ".join(cells) + " |")
        out += ["", f"![accuracy by length, {protocol}]({name})\n"]
    return "\n".join(out)
