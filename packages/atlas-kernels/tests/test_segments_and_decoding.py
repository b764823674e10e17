"""Whole sequence == uneven segments with carried state == token-by-token decoding, for any chunk size."""

import dataclasses

import pytest
import torch

from atlas_kernels import memory_chunk, memory_naive_chunked
from atlas_kernels.testing import assert_pieces_match_one_call, config_id, random_inputs, rel_err, valid_configs

H, D, T = 2, 4, 23
CONFIGS = [
    dataclasses.replace(c, window=w, chunk_size=b)
    for c, w, b in [
        (next(valid_configs(memory="mlp", optimizer="muon", feature_map="poly", bias="l2")), 3, 4),
        (
            next(valid_configs(memory="gated_mlp", optimizer="momentum", feature_map="identity", bias="dot")),
            5,
            1,
        ),
        (
            next(valid_configs(memory="mlp", optimizer="gd", feature_map="exp", bias="l2", exp_init_keys=2)),
            2,
            8,
        ),
        (
            next(valid_configs(memory="linear", optimizer="gd", feature_map="identity", bias="l2")),
            "global",
            4,
        ),
        (
            next(valid_configs(memory="linear", optimizer="gd", feature_map="identity", bias="l2", decay_first=True)),
            1,
            16,
        ),
    ]
]


def _slice(x, a, b):
    return x[:, a:b]


@pytest.mark.parametrize("cfg", CONFIGS, ids=config_id)
def test_segments_and_decoding_match_one_call(cfg):
    from atlas_kernels import init_memory_params

    q, k, v, gates = random_inputs(2, T, H, D, seed=7)
    p = init_memory_params(cfg, H, D, D, dtype=torch.float64, generator=torch.Generator().manual_seed(0))
    cuts = [(0, 3), (3, 13), (13, 17)]  # uneven, not aligned with the chunk size
    assert_pieces_match_one_call(q, k, v, gates, p, cfg, cuts, decode_from=17, tol=1e-12)


def test_naive_chunked_segments_continue_the_same_chunks():
    cfg = CONFIGS[0]
    from atlas_kernels import init_memory_params

    q, k, v, gates = random_inputs(1, 11, H, D, seed=8)
    p = init_memory_params(cfg, H, D, D, dtype=torch.float64)
    o_full, _ = memory_naive_chunked(q, k, v, gates, p, cfg)
    o1, s = memory_naive_chunked(q[:, :6], k[:, :6], v[:, :6], {n: g[:, :6] for n, g in gates.items()}, p, cfg)
    o2, _ = memory_naive_chunked(q[:, 6:], k[:, 6:], v[:, 6:], {n: g[:, 6:] for n, g in gates.items()}, p, cfg, s)
    assert rel_err(o_full, torch.cat([o1, o2], 1)) < 1e-12


def test_detached_state_continues_identically():
    cfg = CONFIGS[1]
    from atlas_kernels import init_memory_params

    q, k, v, gates = random_inputs(1, 9, H, D, seed=9)
    p = init_memory_params(cfg, H, D, D, dtype=torch.float64)
    _, s = memory_chunk(q[:, :4], k[:, :4], v[:, :4], {n: g[:, :4] for n, g in gates.items()}, p, cfg)
    rest = (q[:, 4:], k[:, 4:], v[:, 4:], {n: g[:, 4:] for n, g in gates.items()}, p, cfg)
    torch.testing.assert_close(memory_chunk(*rest, s)[0], memory_chunk(*rest, s.detach())[0])
