"""Validation of the op's arguments and their conversion to the internal heads-first layout.

Public layout is [B, T, H, D] (flash-linear-attention style); inside, tensors are [B, H, T, D] and gates
[B, H, T]. Every error is a ValueError that names the offending argument.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from atlas_kernels.config import MemoryConfig

GATE_NAMES = ("alpha", "eta", "theta", "gamma")
# Values of gates left out of the `gates` dict: no decay, no momentum, every window token counted.
GATE_DEFAULTS = {"alpha": 1.0, "theta": 0.0, "gamma": 1.0}


@dataclass
class OpInputs:
    """Validated, heads-first inputs. Shapes: q, k [B, H, T, Dk]; v [B, H, T, Dv]; gates [B, H, T]
    (gamma [B, H, T, c] with cfg.gamma="per_step": entry j weights window position t - j)."""

    q: torch.Tensor
    k: torch.Tensor
    v: torch.Tensor
    alpha: torch.Tensor
    eta: torch.Tensor
    theta: torch.Tensor
    gamma: torch.Tensor

    @property
    def shape(self) -> tuple[int, int, int, int, int]:
        b, h, t, dk = self.k.shape
        return b, h, t, dk, self.v.shape[-1]


def prepare_inputs(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    gates: dict[str, torch.Tensor],
    params: dict[str, torch.Tensor],
    cfg: MemoryConfig,
) -> OpInputs:
    if not isinstance(cfg, MemoryConfig):
        raise ValueError(f"cfg: expected a MemoryConfig, got {type(cfg).__name__}")
    for name, t in (("q", q), ("k", k), ("v", v)):
        if not isinstance(t, torch.Tensor):
            raise ValueError(f"{name}: expected a tensor [B, T, H, D], got {type(t).__name__}")
        if t.dim() != 4:
            raise ValueError(f"{name}: expected 4 dims [B, T, H, D], got shape {tuple(t.shape)}")
        if not t.is_floating_point():
            raise ValueError(f"{name}: expected a floating dtype, got {t.dtype}")
    if q.shape != k.shape:
        raise ValueError(f"q: shape {tuple(q.shape)} differs from k's {tuple(k.shape)}")
    if v.shape[:3] != k.shape[:3]:
        raise ValueError(f"v: leading dims [B, T, H] = {tuple(v.shape[:3])} differ from k's {tuple(k.shape[:3])}")
    for name, t in (("q", q), ("v", v)):
        if t.dtype != k.dtype:
            raise ValueError(f"{name}: dtype {t.dtype} differs from k's {k.dtype}")
        if t.device != k.device:
            raise ValueError(f"{name}: device {t.device} differs from k's {k.device}")
    B, T, H, Dk = k.shape
    Dv = v.shape[-1]
    if cfg.memory != "linear" and cfg.residual and Dk != Dv:
        raise ValueError(f"v: residual memory needs key dim == value dim, got Dk={Dk}, Dv={Dv} (cfg.residual)")

    if not isinstance(gates, dict):
        raise ValueError(f"gates: expected a dict of [B, T, H] tensors, got {type(gates).__name__}")
    unknown = sorted(set(gates) - set(GATE_NAMES))
    if unknown:
        raise ValueError(f"gates: unknown key(s) {', '.join(unknown)}; expected {', '.join(GATE_NAMES)}")
    required = ["eta"] + (["theta"] if cfg.uses_momentum else [])
    for name in required:
        if gates.get(name) is None:
            raise ValueError(f"gates['{name}']: required for optimizer={cfg.optimizer}")
    # Gates stay in float32 under bf16/fp16 inputs: alpha = 0.999 would round to 1.0 in bf16 (decay lost).
    gate_dtype = torch.float32 if k.dtype in (torch.bfloat16, torch.float16) else k.dtype
    out = {}
    for name in GATE_NAMES:
        g = gates.get(name)
        trail = gate_trailing_shape(name, cfg)
        if g is None:
            out[name] = torch.full((B, H, T, *trail), GATE_DEFAULTS[name], dtype=gate_dtype, device=k.device)
            continue
        if not isinstance(g, torch.Tensor) or tuple(g.shape) != (B, T, H, *trail):
            shape = tuple(g.shape) if isinstance(g, torch.Tensor) else type(g).__name__
            layout = "[B, T, H, c]" if trail else "[B, T, H]"
            mode = f" (cfg.gamma='per_step', c = {cfg.window})" if trail else ""
            raise ValueError(f"gates['{name}']: expected shape {layout} = {(B, T, H, *trail)}{mode}, got {shape}")
        if g.device != k.device:
            raise ValueError(f"gates['{name}']: device {g.device} differs from k's {k.device}")
        # On CUDA the check would force a host sync per call (and per decoded token): CPU tensors only, and not
        # under torch.compile (a value read on the host ends the graph).
        if g.device.type == "cpu" and not torch.compiler.is_compiling() and not bool(torch.isfinite(g).all()):
            raise ValueError(f"gates['{name}']: contains non-finite values")
        out[name] = g.to(gate_dtype).transpose(1, 2)
    check_params(params, cfg, H, Dk, Dv, k)
    return OpInputs(q=q.transpose(1, 2), k=k.transpose(1, 2), v=v.transpose(1, 2), **out)


def gate_trailing_shape(name: str, cfg: MemoryConfig) -> tuple[int, ...]:
    """Dims of a gate after [B, T, H]: (c,) for gamma under cfg.gamma="per_step", else ()."""
    return (cfg.window,) if name == "gamma" and cfg.gamma == "per_step" else ()


def expected_param_shapes(cfg: MemoryConfig, H: int, Dk: int, Dv: int, hidden: int) -> dict[str, tuple[int, ...]]:
    """Shapes of every tensor `params` must hold (exp first-layer weights are given through init keys)."""
    D = cfg.feature_dim(Dk)
    shapes: dict[str, tuple[int, ...]] = {}
    if cfg.memory == "linear":
        if cfg.feature_map != "exp":
            shapes["W"] = (H, Dv, D)
    else:
        shapes["W1"] = (H, Dv, hidden)
        if cfg.feature_map != "exp":
            shapes["W2"] = (H, hidden, D)
            if cfg.memory == "gated_mlp":
                shapes["W3"] = (H, hidden, D)
        if cfg.memory_norm:
            shapes["ln_weight"] = (H, Dv)
            shapes["ln_bias"] = (H, Dv)
    if cfg.feature_map == "poly":
        shapes["feature_coeffs"] = (H, cfg.poly_degree + 1)
    if cfg.learned_temperature:
        shapes["feature_coeffs"] = (H, 1)
    if cfg.feature_map == "exp" and cfg.exp_init_keys > 0:
        shapes["init_keys"] = (H, cfg.exp_init_keys, Dk)
        for name in cfg.feature_input_weights:
            out_dim = Dv if name == "W" else hidden
            shapes[f"init_values.{name}"] = (H, cfg.exp_init_keys, out_dim)
    return shapes


def hidden_dim(params: dict[str, torch.Tensor], cfg: MemoryConfig) -> int:
    if cfg.memory == "linear":
        return 0
    w1 = params.get("W1")
    if not isinstance(w1, torch.Tensor) or w1.dim() != 3:
        raise ValueError("params['W1']: required [H, Dv, hidden] tensor for an MLP memory")
    return w1.shape[-1]


def check_params(params: dict[str, torch.Tensor], cfg: MemoryConfig, H: int, Dk: int, Dv: int, ref) -> None:
    if not isinstance(params, dict):
        raise ValueError(f"params: expected a dict of tensors, got {type(params).__name__}")
    shapes = expected_param_shapes(cfg, H, Dk, Dv, hidden_dim(params, cfg))
    for name, shape in shapes.items():
        p = params.get(name)
        if p is None:
            raise ValueError(f"params['{name}']: required, shape {shape}")
        if not isinstance(p, torch.Tensor):
            raise ValueError(f"params['{name}']: expected a tensor, got {type(p).__name__}")
        if name == "feature_coeffs" and tuple(p.shape) == shape[1:]:
            continue  # shared across heads
        if tuple(p.shape) != shape:
            raise ValueError(f"params['{name}']: expected shape {shape}, got {tuple(p.shape)}")
        if p.device != ref.device:
            raise ValueError(f"params['{name}']: device {p.device} differs from k's {ref.device}")
    unknown = sorted(set(params) - set(shapes))
    if unknown:
        raise ValueError(f"params: unexpected key(s) {', '.join(unknown)} for this MemoryConfig")
