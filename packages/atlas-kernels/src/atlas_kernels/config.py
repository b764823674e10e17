"""`MemoryConfig`: every setting of the unified memory op, each a typed field with a documented default.

The op is the Miras/ATLAS family in one parametrisation (docs/memory-op.md):

    memory  f(x; W):  linear  W phi(x)
                      mlp     r(x) + g(W1 s(W2 phi(x)))
                      gated   r(x) + g(W1 (s(W2 phi(x)) * (W3 phi(x))))
        r(x) = x when `residual` (the raw, finite input: phi(x) may be wider than the output),
        g = LayerNorm (affine weights are outer-loop parameters) when `memory_norm`, else identity;
        norm_placement="readout" drops g from the inner objective and keeps it on the output only.
    bias    l2: 1/2 ||f - v||^2     dot: -<f, v>
    window  L_t(W) = sum_{i=t-c+1..t} gamma_i l(f(k_i; W), v_i)     (c = "global": all i <= t)
        gamma="per_step" (Eqs. 8-9): L_t(W) = sum_{j=0..c-1} gamma_j^(t) l(f(k_{t-j}; W), v_{t-j}), c gates per step
    update  gd:       W_t = alpha_t W_{t-1} - eta_t grad L_t(W_{t-1})
            momentum: S_t = theta_t S_{t-1} + eta_t grad L_t(W_{t-1});  W_t = alpha_t W_{t-1} - S_t
            muon:     S_t = theta_t S_{t-1} + grad L_t(W_{t-1});        W_t = alpha_t W_{t-1} - eta_t NS_k(S_t)
        (decay_target="init" replaces every alpha_t W_{t-1} by W_0 + alpha_t (W_{t-1} - W_0))
    output  y_t = f(q_t; W_t)            (retrieve after the update)

Chunk size b: inside a chunk every gradient is taken at the chunk-start weights; b = 1 is the exact
recurrence. Combinations that are not defined are rejected here (see `_INVALID`).
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, fields
from typing import Any, Literal

MemoryKind = Literal["linear", "mlp", "gated_mlp"]
BiasKind = Literal["l2", "dot"]
OptimizerKind = Literal["gd", "momentum", "muon"]
FeatureKind = Literal["identity", "poly", "exp"]
ActivationKind = Literal["gelu", "silu"]
DecayTarget = Literal["zero", "init"]
NormPlacement = Literal["inner", "readout"]
GammaKind = Literal["token", "per_step"]
ExpTemperature = Literal["learned", "fixed"]
NsForm = Literal["materialise", "gram", "lowrank", "auto"]
MuonPolynomial = Literal["token", "chunk"]
NsEval = Literal["auto", "matmul", "eigh"]
MuonBatch = Literal["per_weight", "padded"]

MEMORY_KINDS = ("linear", "mlp", "gated_mlp")
BIAS_KINDS = ("l2", "dot")
OPTIMIZER_KINDS = ("gd", "momentum", "muon")
FEATURE_KINDS = ("identity", "poly", "exp")
ACTIVATIONS = ("gelu", "silu")
DECAY_TARGETS = ("zero", "init")
NORM_PLACEMENTS = ("inner", "readout")
GAMMA_KINDS = ("token", "per_step")
EXP_TEMPERATURES = ("learned", "fixed")
NS_FORMS = ("materialise", "gram", "lowrank", "auto")
MUON_POLYNOMIALS = ("token", "chunk")
NS_EVALS = ("auto", "matmul", "eigh")
MUON_BATCHES = ("per_weight", "padded")

# Muon's quintic Newton-Schulz coefficients (Keller Jordan); they do not converge to exactly 1,
# singular values of the result land in roughly [0.68, 1.13] (tested band: see newton_schulz).
NsCoeffs = tuple[float, float, float]  # (a, b, c) of X <- a X + (b A + c A A) X, A = X X^T
DEFAULT_NS_COEFFS: NsCoeffs = (3.4445, -4.7750, 2.0315)


# Fields that take one of a fixed set of values, and integer fields with their lower bound.
_CHOICE_FIELDS = {
    "memory": MEMORY_KINDS,
    "bias": BIAS_KINDS,
    "optimizer": OPTIMIZER_KINDS,
    "feature_map": FEATURE_KINDS,
    "activation": ACTIVATIONS,
    "decay_target": DECAY_TARGETS,
    "norm_placement": NORM_PLACEMENTS,
    "gamma": GAMMA_KINDS,
    "exp_temperature": EXP_TEMPERATURES,
    "ns_form": NS_FORMS,
    "muon_polynomial": MUON_POLYNOMIALS,
    "ns_eval": NS_EVALS,
    "muon_batch": MUON_BATCHES,
}
_INT_FIELDS = {
    "expansion": 1,
    "ns_steps": 0,
    "poly_degree": 1,
    "exp_init_keys": 0,
    "exp_taylor_degree": 1,
    "chunk_size": 1,
    "checkpoint_group": 1,
    "checkpoint_min_mib": 0,
}


class MemoryConfigError(ValueError):
    """An invalid memory setting; the message names the field."""


@dataclass(frozen=True)
class MemoryConfig:
    """Settings of the memory op. Every field the paper leaves open has a documented default (docs/deviations.md);
    the measurements behind the defaults live in the docs each field cites.

    Attributes:
        memory: memory architecture, "linear" | "mlp" | "gated_mlp".
        expansion: hidden width of the MLP memories as a multiple of the value head dim (paper: 4).
        activation: inner nonlinearity s of the MLP memories, "gelu" (paper, App. E) | "silu".
        memory_norm: LayerNorm on the MLP residual branch, x + LN(W1 s(W2 x)) (Miras / App. E); ignored for linear
            memory.
        residual: residual connection r(x) = x of the MLP memories (needs key dim == value dim); ignored for linear
            memory.
        bias: attentional bias, "l2" (Omega / delta rule) | "dot" (Hebbian).
        window: Omega window c >= 1 (1 = online rule), or "global" (every past token stays in the objective).
        gamma: how the window gates are given (docs/memory-op.md). "token" (default): one gate per token,
            gates["gamma"] [B, T, H], the separable form gamma_i^(t) = gamma_i of Eqs. 8-9. "per_step": the general
            form, gates["gamma"] [B, T, H, c], entry j weighting window position t - j of step t's objective.
            Not defined for window="global".
        optimizer: inner optimizer, "gd" | "momentum" | "muon".
        ns_steps: Newton-Schulz steps k of Muon (paper: 5).
        ns_coeffs: quintic Newton-Schulz coefficients (a, b, c).
        ns_eps: added to the Frobenius norm before Newton-Schulz pre-normalisation.
        ns_form: how Muon computes NS_k(S) of each token's momentum, the same map every way (docs/muon.md).
            "auto" (default): "gram" on a CPU when every weight Muon updates has fewer than
            `muon_lowrank.FACTORED_MIN_WEIGHT` entries, "lowrank" otherwise ("Choosing the form"); the token
            oracles treat it as "materialise". "lowrank": the factored path, no per-token momentum or weights
            formed. "gram": per-token momenta, the steps on the r x r Gram matrix. "materialise": per-token
            momenta, every step on the r x n iterate.
        muon_polynomial: "token" (default, Muon): every token's momentum gets its own Newton-Schulz polynomial.
            "chunk": an APPROXIMATION of Muon, not the paper's optimizer: one polynomial per chunk, that of the
            chunk's first momentum (docs/muon.md, "Approximate Muon: one polynomial per chunk").
        muon_float64: the factored Muon path builds and applies its Gram matrices and polynomials in float64
            whatever the compute dtype (default True; docs/muon.md, "Precision of the factored path"). False
            computes in the op's dtype, faster on a CPU. No effect on the other paths or without Muon.
        ns_eval: how the factored path evaluates each token's r x r polynomial, the same map every way.
            "auto" (default): "eigh" where the polynomial is computed in float64 on a CPU, "matmul" otherwise
            (docs/muon.md, "Evaluating the polynomial on the eigenvalues"). "matmul": k r x r products. "eigh": on
            the eigenvalues of the Gram matrix, with a closed-form backward; only on the factored path.
        muon_batch: how the factored path computes the Gram matrices and polynomials of the weights Muon updates,
            the same values every way (docs/muon.md, "One batch for all the weights"). "per_weight" (default): one
            set of r x r operations per weight. "padded": every weight's factors zero-padded to the largest
            weight's shape and stacked, one set of operations for all of them: 2-3x fewer GEMM launches for those
            steps at the cost of the padding's flops (for small memory heads on a GPU; slower on a CPU and, by the
            flop count, at the paper sizes); only on the factored path.
        feature_map: phi on keys and queries, "identity" | "poly" | "exp" (the phi* kernel, dual form).
        poly_degree: degree p of the polynomial map (symmetric monomials, dimension C(d + p, p)).
        exp_init_keys: number P of learned keys that span the initial first-layer weight of the exp memories,
            W_0 phi*(x) = sum_p w_p exp(m_p . x); 0 means W_0 = 0 on that layer.
        exp_temperature: the exp kernel exp(tau q.k) of unit-norm q, k. "fixed" (default, the paper's form):
            tau = 1. "learned": a per-head tau > 0, params["feature_coeffs"] [H, 1], initialised at sqrt(Dk)
            (docs/features.md; why the default stays "fixed": docs/deviations.md).
        exp_taylor_degree: truncation degree of phi* in the naive oracle only (raised with tau > 1 until the
            truncation error stays below 1/(n+1)!).
        decay_first: gated-delta ordering, W_t = alpha_t W_{t-1} - eta_t grad L_t(alpha_t W_{t-1})
            (flash-linear-attention's gated delta rule). Linear memory only.
        exact_delta: the exact token recurrence computed chunkwise (WY/UT form) instead of the chunk-start
            approximation. The online delta rule only: linear memory, l2 bias, window 1, gd, identity or poly
            features.
        decay_target: what alpha decays the inner weights toward. "zero" (the paper; default):
            W_t = alpha_t W_{t-1} - (update). "init": toward the learned W_0 of `params`,
            W_t = W_0 + alpha_t (W_{t-1} - W_0) - (update), a departure kept as an option because under "zero"
            the MLP + LayerNorm memory's outer gradients grow exponentially in T (docs/deviations.md,
            docs/memory-op.md). Rejected for exp features with exp_init_keys > 0 (that W_0 lives in dual form).
        norm_placement: where the memory LayerNorm acts (MLP memories). "inner" (default): in the memory,
            f(x) = x + LN(W1 s(W2 x)). "readout": the inner loop trains x + W1 s(W2 x) and only the retrieval is
            normalised (benchmarks/grad_growth.md). No effect without `memory_norm` or for linear memory.
        chunk_size: chunk size b of the chunkwise-parallel op (Miras/TNT use 16 or 64).
        checkpoint_group: G >= 1 chunks per checkpoint group when the torch chunk op checkpoints: G > 1 keeps
            every G-th chunk-boundary state and recomputes the others (docs/chunkwise.md, "Checkpointing"). Changes
            no value; the Triton kernels ignore it.
        checkpoint_min_mib: Muon checkpoints by default when a gradient will be taken and one copy of the state
            per token of the call would exceed this many MiB (0: always). Changes no value; an explicit
            `checkpoint=` argument of the op wins (docs/muon.md, "Chunk checkpointing").
        gate_eps: alpha and theta are clamped to at least this value before the log of the cumulative products.
        norm_eps: epsilon of the memory LayerNorm.
    """

    memory: MemoryKind = "mlp"
    expansion: int = 4
    activation: ActivationKind = "gelu"
    memory_norm: bool = True
    residual: bool = True
    bias: BiasKind = "l2"
    window: int | Literal["global"] = 1
    gamma: GammaKind = "token"
    optimizer: OptimizerKind = "gd"
    ns_steps: int = 5
    ns_coeffs: NsCoeffs = DEFAULT_NS_COEFFS
    ns_eps: float = 1e-7
    ns_form: NsForm = "auto"
    muon_polynomial: MuonPolynomial = "token"
    muon_float64: bool = True
    ns_eval: NsEval = "auto"
    muon_batch: MuonBatch = "per_weight"
    feature_map: FeatureKind = "identity"
    poly_degree: int = 2
    exp_init_keys: int = 0
    exp_temperature: ExpTemperature = "fixed"
    exp_taylor_degree: int = 12
    decay_first: bool = False
    exact_delta: bool = False
    decay_target: DecayTarget = "zero"
    norm_placement: NormPlacement = "inner"
    chunk_size: int = 16
    checkpoint_group: int = 1
    checkpoint_min_mib: int = 256
    gate_eps: float = 1e-12
    norm_eps: float = 1e-5

    def __post_init__(self) -> None:
        if self.gamma == "window":  # the spelling before 0.4.0
            raise MemoryConfigError(
                "gamma: 'window' is now spelled 'per_step' (c gates per step, Eqs. 8-9); 'window' names only the "
                "Omega window c (the `window` field)"
            )
        for name, choices in _CHOICE_FIELDS.items():
            _check_choice(name, getattr(self, name), choices)
        for name, low in _INT_FIELDS.items():
            _check_int(name, getattr(self, name), low)
        if self.window != "global":
            _check_int("window", self.window, 1)
        if not (isinstance(self.ns_coeffs, tuple | list) and len(self.ns_coeffs) == 3):
            raise MemoryConfigError(f"ns_coeffs: expected three floats (a, b, c), got {self.ns_coeffs!r}")
        object.__setattr__(self, "ns_coeffs", tuple(float(x) for x in self.ns_coeffs))
        for name in ("ns_eps", "gate_eps", "norm_eps"):
            value = getattr(self, name)
            if not (isinstance(value, int | float) and math.isfinite(value) and value > 0):
                raise MemoryConfigError(f"{name}: expected a positive float, got {value!r}")
        for predicate, message in _INVALID:
            if predicate(self):
                raise MemoryConfigError(message)

    @property
    def is_global(self) -> bool:
        return self.window == "global"

    @property
    def inner_norm(self) -> bool:
        """The LayerNorm is part of the memory the inner loop trains (not only of its read-out)."""
        return self.memory_norm and self.norm_placement == "inner"

    @property
    def uses_momentum(self) -> bool:
        return self.optimizer in ("momentum", "muon")

    @property
    def learned_temperature(self) -> bool:
        """Exp features with a learned temperature tau (params["feature_coeffs"] holds it)."""
        return self.feature_map == "exp" and self.exp_temperature == "learned"

    @property
    def weight_names(self) -> tuple[str, ...]:
        """Inner (fast) weights of the memory, in the order the op reports them."""
        return {"linear": ("W",), "mlp": ("W1", "W2"), "gated_mlp": ("W1", "W2", "W3")}[self.memory]

    @property
    def feature_input_weights(self) -> tuple[str, ...]:
        """The weights that act on phi(x) (the first layer); for exp features they live in dual form."""
        return {"linear": ("W",), "mlp": ("W2",), "gated_mlp": ("W2", "W3")}[self.memory]

    def feature_dim(self, key_dim: int) -> int:
        """Width of phi(x) for keys of width `key_dim` (exp: infinite, returns -1)."""
        if self.feature_map == "identity":
            return key_dim
        if self.feature_map == "poly":
            return math.comb(key_dim + self.poly_degree, self.poly_degree)
        return -1

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["ns_coeffs"] = list(self.ns_coeffs)
        return d

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> MemoryConfig:
        known = {f.name for f in fields(cls)}
        unknown = sorted(set(data) - known)
        if unknown:
            raise MemoryConfigError(f"unknown MemoryConfig key(s): {', '.join(unknown)}")
        values = dict(data)
        if "ns_coeffs" in values:
            values["ns_coeffs"] = tuple(values["ns_coeffs"])
        return cls(**values)


def _check_choice(name: str, value: Any, choices: tuple[str, ...]) -> None:
    if value not in choices:
        raise MemoryConfigError(f"{name}: expected one of {', '.join(choices)}, got {value!r}")


def _check_int(name: str, value: Any, minimum: int) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise MemoryConfigError(f"{name}: expected an int >= {minimum}, got {value!r}")


def _may_run_factored_muon(c: MemoryConfig) -> bool:
    """Whether the factored Muon path can run (`muon_lowrank.resolve_ns_form`; "auto" picks it by device and size)."""
    return c.optimizer == "muon" and (c.ns_form in ("lowrank", "auto") or c.muon_polynomial == "chunk")


# (predicate, message) pairs for combinations the op does not define.
_INVALID = (
    (
        lambda c: c.muon_polynomial != "token" and c.optimizer != "muon",
        "muon_polynomial: only Muon has a Newton-Schulz polynomial; leave it 'token' for optimizer=gd / momentum",
    ),
    (
        lambda c: c.ns_eval == "eigh" and not _may_run_factored_muon(c),
        "ns_eval: 'eigh' evaluates the Gram-space polynomial of the factored Muon path only (optimizer=muon with "
        "ns_form 'lowrank' or 'auto', or muon_polynomial='chunk'); use 'auto' or 'matmul' otherwise",
    ),
    (
        lambda c: c.muon_batch != "per_weight" and not _may_run_factored_muon(c),
        "muon_batch: 'padded' batches the weights of the factored Muon path only (optimizer=muon with ns_form "
        "'lowrank' or 'auto', or muon_polynomial='chunk'); leave it 'per_weight' otherwise",
    ),
    (
        lambda c: c.gamma == "per_step" and c.window == "global",
        "gamma: 'per_step' (c gates per step) needs a finite window c; window='global' has no fixed width, "
        "use gamma='token'",
    ),
    (
        lambda c: c.optimizer == "muon" and c.feature_map == "exp",
        "optimizer: muon cannot act on the infinite-dimensional first-layer weight of feature_map=exp "
        "(Newton-Schulz needs the explicit matrix)",
    ),
    (
        lambda c: c.optimizer == "momentum" and c.feature_map == "exp",
        "optimizer: momentum with feature_map=exp is not defined by the paper (DeepTransformers, SWDT and Dot "
        "use gd); use optimizer=gd",
    ),
    (
        lambda c: c.decay_first and c.memory != "linear",
        "decay_first: the gated-delta ordering is defined for memory=linear only",
    ),
    (
        lambda c: c.decay_first and c.optimizer != "gd",
        "decay_first: the gated-delta ordering is defined for optimizer=gd only",
    ),
    (
        lambda c: c.decay_first and c.feature_map == "exp",
        "decay_first: not defined for feature_map=exp",
    ),
    (
        lambda c: (
            c.exact_delta
            and not (
                c.memory == "linear"
                and c.bias == "l2"
                and c.window == 1
                and c.optimizer == "gd"
                and c.feature_map != "exp"
            )
        ),
        "exact_delta: the exact chunkwise form exists for the online delta rule only (memory=linear, bias=l2, "
        "window=1, optimizer=gd, feature_map identity or poly)",
    ),
    (
        lambda c: c.decay_target == "init" and c.feature_map == "exp" and c.exp_init_keys > 0,
        "decay_target: 'init' is not defined for feature_map=exp with exp_init_keys > 0 (the first layer's W_0 "
        "exists only in dual form over the learned keys); use decay_target='zero' or exp_init_keys=0 (W_0 = 0 on "
        "that layer)",
    ),
)
