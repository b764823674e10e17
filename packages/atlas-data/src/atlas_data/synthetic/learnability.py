"""The learnability streams of the paper (section 6.4, Figure 6): pairs (i_j, o_j), i, o in R^d, j = 1..T.

A memory MLP M is trained online on the stream (one gradient step per position) and its normalised loss
||M(i_j) - o_j||^2 / ||o_j||^2 is tracked against the position j (the paper prints ||i_j - o_j||^2, a typo).

Inputs x_j ~ N(0, I_d) i.i.d.; every random weight is drawn once per stream from the stream's seed. The five
target functions, as this package reads them (the paper gives one line each; scales are ours):

    1 low_rank              o = W^T i,  W = X Y,  X in R^{d x k}, Y in R^{k x d}, entries N(0, 1/d) and N(0, 1/k)
    2 mlp                   o = W_2 GELU(W_1 i), one hidden layer of width d, entries N(0, 1/d), no biases
    3 attention_mlp         q = W_Q^T i, k = W_K^T i, v = W_V^T i (entries N(0, 1/d)); a_j = causal softmax
                            attention over positions <= j (scale 1/sqrt(d)); o_j = MLP(a_j); input i_j = x_j
    4 attention_inputs_mlp  the same attention, but the memory reads the attention output: i_j = a_j, o_j = MLP(a_j)
    5 swa_mlp               3 with sliding-window attention over the last `window` positions (paper: 512)

`generator` picks how the random quantities above are drawn, so that a finding can be checked on a second stream
family with the same five definitions. "gaussian" (default) is the list above. "orthogonal": inputs uniform on the
sphere of radius sqrt(d) (same scale, no radial spread), every square weight a random orthogonal matrix (Haar;
singular values all 1 instead of the Marchenko-Pastur spread of N(0, 1/d) entries), the low-rank map X Y with
orthonormal factors (rank k, singular values 1). Attention, GELU and the standardisation are the same.

With `standardize` (default) the inputs and the outputs of each stream are divided by one scalar each, their root
mean square over the stream, so every setting reaches the memory at unit scale per coordinate (the attention
outputs of settings 3-5 are otherwise ~20x smaller than the raw inputs); the normalised loss is unchanged by the
output scale, but the optimizer's step sizes are not.

Settings 3 and 5 are not functions of i_j alone (o_j depends on the past), so a memory can only reach a loss below
1 by fitting their predictable part; settings 1, 2 and 4 are functions of the input.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

import numpy as np

from atlas_data.errors import ConfigError
from atlas_data.synthetic import as_rng

LEARNABILITY_SETTINGS = ("low_rank", "mlp", "attention_mlp", "attention_inputs_mlp", "swa_mlp")
GENERATORS = ("gaussian", "orthogonal")


@dataclass(frozen=True)
class LearnabilityConfig:
    """Stream sizes: dimension d (paper: 256), length T, rank k of setting 1, window of setting 5 (paper: 512); the
    `generator` of the random inputs and weights (module docstring)."""

    dim: int = 256
    seq_len: int = 2048
    rank: int = 16
    window: int = 512
    standardize: bool = True
    generator: str = "gaussian"

    def __post_init__(self) -> None:
        for name in ("dim", "seq_len", "rank", "window"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ConfigError(f"learnability.{name}: expected an int >= 1, got {value!r}")
        if self.rank > self.dim:
            raise ConfigError(f"learnability.rank: expected <= dim={self.dim}, got {self.rank}")
        if self.generator not in GENERATORS:
            raise ConfigError(
                f"learnability.generator: expected one of {', '.join(GENERATORS)}, got {self.generator!r}"
            )

    def to_dict(self) -> dict[str, int | bool | str]:
        return asdict(self)


def setting_name(setting: int | str) -> str:
    """'low_rank' for 1 or 'low_rank' (settings are numbered 1..5 as in the paper)."""
    if isinstance(setting, int) or (isinstance(setting, str) and setting.isdigit()):
        idx = int(setting)
        if not 1 <= idx <= len(LEARNABILITY_SETTINGS):
            raise ConfigError(f"learnability.setting: expected 1..{len(LEARNABILITY_SETTINGS)}, got {setting}")
        return LEARNABILITY_SETTINGS[idx - 1]
    if setting not in LEARNABILITY_SETTINGS:
        raise ConfigError(
            f"learnability.setting: expected 1..5 or one of {', '.join(LEARNABILITY_SETTINGS)}, got {setting!r}"
        )
    return setting


def _gelu(x: np.ndarray) -> np.ndarray:
    return 0.5 * x * (1.0 + np.tanh(np.sqrt(2.0 / np.pi) * (x + 0.044715 * x**3)))


def _causal_attention(q: np.ndarray, k: np.ndarray, v: np.ndarray, window: int | None) -> np.ndarray:
    t, d = q.shape
    out = np.empty_like(v)
    block = 256
    for start in range(0, t, block):  # row blocks keep memory at block x T
        stop = min(start + block, t)
        scores = (q[start:stop] @ k.T) / np.sqrt(d)
        rows = np.arange(start, stop)[:, None]
        cols = np.arange(t)[None, :]
        allowed = cols <= rows
        if window is not None:
            allowed &= cols > rows - window
        scores = np.where(allowed, scores, -np.inf)
        scores -= scores.max(axis=1, keepdims=True)
        w = np.exp(scores)
        w /= w.sum(axis=1, keepdims=True)
        out[start:stop] = w @ v
    return out


def generate_stream(
    setting: int | str, cfg: LearnabilityConfig, seed: int | np.random.Generator | None = 0
) -> tuple[np.ndarray, np.ndarray]:
    """(inputs, outputs) float32 [T, d] of one learnability setting (module docstring), deterministic in `seed`."""
    name = setting_name(setting)
    rng = as_rng(seed)
    d, t = cfg.dim, cfg.seq_len
    orthogonal = cfg.generator == "orthogonal"
    x = rng.standard_normal((t, d))
    if orthogonal:  # uniform on the sphere of radius sqrt(d): the Gaussian's scale without its radial spread
        x *= np.sqrt(d) / np.linalg.norm(x, axis=1, keepdims=True)

    def square() -> np.ndarray:  # N(0, 1/d) entries, or Haar orthogonal (the same scale per coordinate)
        return _haar(rng, d, d) if orthogonal else rng.standard_normal((d, d)) / np.sqrt(d)

    def mlp(z: np.ndarray) -> np.ndarray:
        w1, w2 = square(), square()
        return _gelu(z @ w1) @ w2

    if name == "low_rank":
        if orthogonal:
            xk, yk = _haar(rng, d, cfg.rank), _haar(rng, d, cfg.rank).T
        else:
            xk = rng.standard_normal((d, cfg.rank)) / np.sqrt(d)
            yk = rng.standard_normal((cfg.rank, d)) / np.sqrt(cfg.rank)
        inputs, outputs = x, x @ (xk @ yk)
    elif name == "mlp":
        inputs, outputs = x, mlp(x)
    else:
        wq, wk, wv = (square() for _ in range(3))
        window = cfg.window if name == "swa_mlp" else None
        attn = _causal_attention(x @ wq, x @ wk, x @ wv, window)
        inputs = attn if name == "attention_inputs_mlp" else x
        outputs = mlp(attn)
    if cfg.standardize:  # one scalar per stream and side: mean squared coordinate 1
        inputs = inputs / np.sqrt(np.mean(inputs**2))
        outputs = outputs / np.sqrt(np.mean(outputs**2))
    return inputs.astype(np.float32), outputs.astype(np.float32)


def _haar(rng: np.random.Generator, rows: int, cols: int) -> np.ndarray:
    """A [rows, cols] matrix with orthonormal columns (cols <= rows), Haar-distributed: QR of a Gaussian matrix
    with the signs of R's diagonal moved into Q."""
    q, r = np.linalg.qr(rng.standard_normal((rows, cols)))
    return q * np.sign(np.diag(r))[None, :]


def mean_predictor_losses(outputs: np.ndarray) -> np.ndarray:
    """[T] normalised losses ||c - o_j||^2 / ||o_j||^2 of the best constant predictor in hindsight, c = the stream's
    mean output: a memory that does not beat it has learned nothing about the inputs."""
    o = np.asarray(outputs, dtype=np.float64)
    c = o.mean(axis=0)
    return ((c - o) ** 2).sum(-1) / np.maximum((o**2).sum(-1), 1e-12)
