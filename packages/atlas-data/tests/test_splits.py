"""Document-level train/validation assignment."""

from __future__ import annotations

from atlas_data.splits import TRAIN, VALIDATION, SplitAssigner, hashed_split


def _assign(groups: list[str], fraction: float, seed: int) -> list[str]:
    assigner: SplitAssigner[str] = SplitAssigner(fraction, seed)
    out = []
    for g in groups:
        out += assigner.push(g, g)
    out += assigner.finish()
    assert [item for item, _ in out] == groups  # order preserved, nothing lost
    return [split for _, split in out]


def test_fraction_is_respected_and_seeded() -> None:
    groups = [f"doc-{i}" for i in range(20_000)]
    a = _assign(groups, 0.05, seed=1)
    assert 0.045 < a.count(VALIDATION) / len(a) < 0.055
    assert _assign(groups, 0.05, seed=1) == a
    assert _assign(groups, 0.05, seed=2) != a


def test_assignment_depends_on_the_group_not_on_position() -> None:
    groups = [f"doc-{i}" for i in range(500)]
    full = _assign(groups, 0.1, seed=0)
    # Dropping documents (e.g. a max_documents cap) leaves every other document where it was.
    assert _assign(groups[:300], 0.1, seed=0)[:299] == full[:299]
    assert all(s == hashed_split(g, 0, 0.1) for g, s in zip(groups[:-1], full[:-1]))


def test_two_documents_always_give_a_non_empty_validation_split() -> None:
    for seed in range(50):
        assert sorted(_assign(["a", "b"], 0.01, seed)) == [TRAIN, VALIDATION]
    # ...and a non-empty training split when the draw puts everything in validation.
    for seed in range(50):
        splits = _assign(["a", "b", "c"], 0.5, seed)
        assert TRAIN in splits and VALIDATION in splits


def test_zero_fraction_and_single_document_give_training_only() -> None:
    assert set(_assign([f"d{i}" for i in range(50)], 0.0, seed=0)) == {TRAIN}
    assert all(_assign(["only"], 0.5, seed) == [TRAIN] for seed in range(20))
