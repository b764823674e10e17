"""The README's first screen and `reports/study/reading.md` are written by hand as verdicts land; their counts must
agree with the generated `reports/study/verdicts.md`, so a verdict committed without its prose (or prose edited
without a verdict) fails here."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
VERDICTS = ROOT / "reports" / "study" / "verdicts.md"
ROWS = ("holds", "does not hold", "inconclusive", "not resolved (floor)", "not run", "other scale", "not testable")

UNITS = (
    "zero one two three four five six seven eight nine ten eleven twelve thirteen fourteen fifteen sixteen seventeen "
    "eighteen nineteen"
).split()
TENS = {20: "twenty", 30: "thirty", 40: "forty", 50: "fifty", 60: "sixty"}


def _word(n: int) -> str:
    """19 -> "nineteen", 23 -> "twenty-three": how the README's lead spells the number of claims answered."""
    if n < 20:
        return UNITS[n]
    return TENS[n - n % 10] + (f"-{UNITS[n % 10]}" if n % 10 else "")


@pytest.fixture(scope="module")
def v2() -> dict[str, int]:
    """verdict -> count under rule v2 on new evidence, from the summary table of verdicts.md, plus "v1 cpu": the v1
    CPU claims re-read by rule v2, which have no fresh verdict of their own (their v2 successors answer them)."""
    text = VERDICTS.read_text()
    new, v1_cpu = {}, 0
    for row in ROWS:
        m = re.search(rf"^\| {re.escape(row)} \| (\d+) \| (\d+) \| (\d+) \|$", text, re.M)
        # the report leaves out a verdict that no column has (e.g. "not run" once every CPU claim is judged)
        assert m or row == "not run", f"{VERDICTS}: no summary row {row!r}"
        new[row] = int(m[1]) if m else 0
        if m and row in ("holds", "does not hold", "inconclusive", "not resolved (floor)"):
            v1_cpu += int(m[2])
    return {**new, "v1 cpu": v1_cpu}


def test_readme_first_screen_counts_match_the_generated_verdicts(v2):
    text = (ROOT / "README.md").read_text()
    m = re.search(
        r"^\| rule v2 on new runs \([^)]*\) \| (\d+) \| (\d+) \| (\d+) \| (\d+) \| (\d+) \| (\d+) \| (\d+) "
        r"\((?:(\d+) MQAR v2, running; )?(?:(\d+) MQAR extrapolation; )?(\d+) v1 claims",
        text,
        re.M,
    )
    assert m, "README.md: no 'rule v2 on new runs' counts row in the expected form"
    got = [int(g or 0) for g in m.groups()]  # a running part is left out once its claims are judged
    holds, dnh, inc, floor, gpu, untestable, left, mqar, extrap, v1 = got
    assert (holds, dnh, inc, floor) == (
        v2["holds"],
        v2["does not hold"],
        v2["inconclusive"],
        v2["not resolved (floor)"],
    ), f"README.md counts {got} vs verdicts.md {v2}"
    assert (gpu, untestable) == (v2["other scale"], v2["not testable"]), f"README.md counts {got} vs {v2}"
    assert mqar + extrap == v2["not run"] and v1 == v2["v1 cpu"] and left == mqar + extrap + v1, (
        f"README.md: CPU claims without a fresh verdict {left} ({mqar} + {extrap} + {v1}) vs verdicts.md {v2}"
    )
    lead = re.search(r"Do the paper's claims hold\? (\S+) answered", text)
    assert lead and lead[1].lower() == _word(holds + dnh + inc), (
        f"README.md: the lead says {lead[1] if lead else None!r} answered, verdicts.md has {holds + dnh + inc}"
    )


def test_reading_counts_match_the_generated_verdicts(v2):
    text = (ROOT / "reports" / "study" / "reading.md").read_text()
    for row in ("holds", "does not hold", "inconclusive", "not resolved (floor)"):
        m = re.search(rf"^\| {re.escape(row)} \| [^|]+ \| [^|]+ \| (\d+) \|$", text, re.M)
        assert m and int(m[1]) == v2[row], f"reading.md: {row!r} row says {m[1] if m else None}, verdicts.md {v2[row]}"
    m = re.search(
        r"^\| CPU claim without a fresh verdict \| - \| - \| (\d+) \((?:(\d+) registered v2 claims? )?", text, re.M
    )
    assert m, "reading.md: no 'CPU claim without a fresh verdict' row in the expected form"
    assert (int(m[1]), int(m[2] or 0)) == (v2["not run"] + v2["v1 cpu"], v2["not run"]), f"reading.md: {m[0]!r} vs {v2}"
