import pytest
import torch

from atlas_kernels import newton_schulz

# The quintic (3.4445, -4.7750, 2.0315) does not converge to 1: after 5 steps, singular values that start
# within ~10x of the largest land in this band (measured: [0.6818, 1.1344]).
BAND = (0.68, 1.14)


@pytest.mark.parametrize("shape", [(64, 16, 64), (64, 64, 16), (64, 33, 47)])
def test_singular_values_in_band(shape):
    x = torch.randn(*shape, generator=torch.Generator().manual_seed(0), dtype=torch.float64)
    s = torch.linalg.svdvals(newton_schulz(x, steps=5))
    assert BAND[0] <= s.min().item() and s.max().item() <= BAND[1]


def test_keeps_singular_vectors_and_is_scale_invariant():
    x = torch.randn(24, 40, generator=torch.Generator().manual_seed(1), dtype=torch.float64)
    y = newton_schulz(x)
    # only the eps of the pre-normalisation breaks exact scale invariance
    torch.testing.assert_close(newton_schulz(1e3 * x, eps=0.0), newton_schulz(x, eps=0.0), rtol=1e-9, atol=1e-9)
    u, _, vh = torch.linalg.svd(x, full_matrices=False)
    # y = U f(S) V^T: U^T y V is diagonal
    core = u.mT @ y @ vh.mT
    off = core - torch.diag_embed(torch.diagonal(core))
    assert off.abs().max() < 1e-10


def test_tall_equals_transposed_wide():
    x = torch.randn(5, 30, 8, generator=torch.Generator().manual_seed(2), dtype=torch.float64)
    torch.testing.assert_close(newton_schulz(x), newton_schulz(x.mT).mT)


def test_more_steps_move_towards_one_and_zero_stays_zero():
    x = torch.randn(16, 64, generator=torch.Generator().manual_seed(3), dtype=torch.float64)
    s1 = torch.linalg.svdvals(newton_schulz(x, steps=1))
    s5 = torch.linalg.svdvals(newton_schulz(x, steps=5))
    assert (s5 - 1).abs().max() < (s1 - 1).abs().max()
    assert newton_schulz(torch.zeros(4, 6, dtype=torch.float64)).abs().max() == 0


def test_rejects_vectors():
    with pytest.raises(ValueError, match="x: expected"):
        newton_schulz(torch.ones(3))
