"""The optimizer builder and the schedule at their edges: a model with parameters in one group only, a one-step run,
the exact values where warmup hands over to the cosine and where the cosine reaches its floor, and set_lr.

Written against the mutants `make mutants` left alive in train/optim.py (docs/testing.md); test_optim_groups.py
covers which parameters decay and the schedule over a 40-step run.
"""

from __future__ import annotations

import math

import pytest
import torch
from torch import nn

from atlas_experiments.train import optim as optim_mod
from atlas_experiments.train.config import OptimConfig


@pytest.mark.parametrize(
    ("module", "sizes"),
    [(nn.LayerNorm(4), (0, 2)), (nn.Linear(4, 4, bias=False), (1, 0)), (nn.Embedding(5, 4), (1, 0))],
)
def test_one_empty_group_is_fine(module, sizes):
    # both groups always exist (a fixed optimizer-state layout), and either may be empty
    opt = optim_mod.build_optimizer(module, OptimConfig(lr=0.5, weight_decay=0.1))
    assert tuple(len(g["params"]) for g in opt.param_groups) == sizes
    assert [g["weight_decay"] for g in opt.param_groups] == [0.1, 0.0]
    assert [g["lr"] for g in opt.param_groups] == [0.5, 0.5]


def test_a_one_step_run():
    cfg = OptimConfig(lr=2.0, warmup_fraction=0.0, min_lr_ratio=0.25)
    assert optim_mod.lr_at(0, cfg, 1) == 2.0  # the peak: no warmup, the cosine starts at the top
    assert optim_mod.lr_at(1, cfg, 1) == pytest.approx(0.5)  # the floor, reached at total_steps
    with pytest.raises(ValueError, match="total_steps must be >= 1"):
        optim_mod.lr_at(0, cfg, 0)


def test_warmup_hands_over_at_the_peak_and_the_cosine_reaches_the_floor_at_the_end():
    cfg = OptimConfig(lr=2.0, warmup_steps=4, min_lr_ratio=0.1)
    assert [optim_mod.lr_at(s, cfg, 12) for s in range(4)] == [0.5, 1.0, 1.5, 2.0]
    assert optim_mod.lr_at(4, cfg, 12) == 2.0  # progress 0: still the peak
    assert optim_mod.lr_at(8, cfg, 12) == pytest.approx(0.2 + 0.5 * 1.8)  # half way down the cosine
    assert optim_mod.lr_at(6, cfg, 12) == pytest.approx(0.2 + 0.5 * 1.8 * (1.0 + math.cos(math.pi / 4)))
    assert optim_mod.lr_at(12, cfg, 12) == pytest.approx(0.2) == optim_mod.lr_at(50, cfg, 12)


def test_a_cosine_of_one_step():
    # warmup takes all but one step: the span is 1, so the last step is the peak and total_steps the floor
    cfg = OptimConfig(lr=1.0, warmup_steps=3, min_lr_ratio=0.0)
    assert [optim_mod.lr_at(s, cfg, 4) for s in range(5)] == pytest.approx([1 / 3, 2 / 3, 1.0, 1.0, 0.0])
    # and a warmup as long as the run never divides by a zero span
    assert optim_mod.lr_at(4, OptimConfig(lr=1.0, warmup_steps=4), 4) == 1.0


def test_set_lr_sets_every_group():
    opt = optim_mod.build_optimizer(nn.Sequential(nn.Linear(2, 2), nn.LayerNorm(2)), OptimConfig(lr=1.0))
    optim_mod.set_lr(opt, 0.125)
    assert [g["lr"] for g in opt.param_groups] == [0.125, 0.125]
    assert isinstance(opt, torch.optim.AdamW)
