"""What one training step of a model costs, counted rather than derived: the model runs forward and backward on the
`meta` device (shapes only, no data, no memory) while a dispatch mode tallies every aten call (docs/costs.md).

- GEMM FLOPs come from torch's own formulas (`torch.utils.flop_counter`: mm, bmm, addmm, convolution and the
  attention kernels), so they are exact for the code as written, including the chunk recomputation of Muon's
  checkpointing and attention's full masked score matrix where the implementation computes it. Those of GEMMs on
  float64 tensors are also tallied apart: the factored Muon path builds and applies its polynomials in float64 by
  default (`MemoryConfig.muon_float64`), and a GPU runs those at a tenth of its bf16 rate.
- Every other non-view call counts one operation per output element ("pointwise" in the tables; exp or a
  reduction costs more than one FLOP on a GPU's ALUs, but they are bandwidth-bound there anyway).
- Bytes are what the calls read and write if nothing is fused: every non-view call's tensor inputs plus its
  outputs. A fusing compiler removes most of the pointwise traffic; the figure bounds it from above. Tensors are
  the model's float32; bf16 autocast would halve much of it.
- Attention is counted as a GPU runs it, one fused kernel that never writes the score matrix (on `meta` torch
  would decompose it into explicit matmuls and a softmax): forward 4 T_q T_k D FLOPs per head (half with
  `is_causal`, whose masked blocks a flash kernel skips; an explicit mask skips nothing), backward 2.5 times that
  (the scores recomputed, four more products), bytes only its inputs and outputs.

The counts split into the decoder layers (calls made while a module under `.layers.<i>` is active, forward or
backward) and the rest (embedding, final norm, LM head, loss). Counting on `meta` takes the code paths a GPU takes
where the device matters (Muon's factored form with matmul polynomials; no CPU-only checks), which is what a
GPU projection wants.
"""

from __future__ import annotations

import contextlib
import re
from dataclasses import asdict, dataclass
from unittest import mock

import torch
import torch.nn.functional as F
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_flatten
from torch.utils.flop_counter import flop_registry
from torch.utils.module_tracker import ModuleTracker

# Metadata-only calls that the schema does not mark as views.
_METADATA = {"_unsafe_view", "lift_fresh", "_reshape_alias", "detach", "alias"}
_LAYER = re.compile(r"\.layers\.\d+")


@dataclass
class Tally:
    """Counts of one part of a step (a layer, or everything outside the layers)."""

    gemm_flops: float = 0.0
    gemm_flops_fp64: float = 0.0  # the part of gemm_flops on float64 tensors
    pointwise_ops: float = 0.0
    bytes_unfused: float = 0.0
    kernels: int = 0
    gemm_kernels: int = 0

    def add(self, other: Tally) -> None:
        for name, value in asdict(other).items():
            setattr(self, name, getattr(self, name) + value)

    def scaled(self, factor: float) -> Tally:
        return Tally(**{name: value * factor for name, value in asdict(self).items()})

    @property
    def flops(self) -> float:
        return self.gemm_flops + self.pointwise_ops

    @property
    def gemm_share(self) -> float:
        return self.gemm_flops / self.flops if self.flops else 0.0

    @property
    def fp64_share(self) -> float:
        return self.gemm_flops_fp64 / self.flops if self.flops else 0.0


class _Counter(TorchDispatchMode):
    def __init__(self, tracker: ModuleTracker) -> None:
        super().__init__()
        self.tracker = tracker
        self.layer = Tally()
        self.rest = Tally()
        self._paused = False

    @contextlib.contextmanager
    def paused(self):
        self._paused = True
        try:
            yield
        finally:
            self._paused = False

    def _part(self) -> Tally:
        return self.layer if any(_LAYER.search(p) for p in self.tracker.parents) else self.rest

    def tally_fused(self, flops: float, tensors) -> None:
        part = self._part()
        part.kernels += 1
        part.gemm_kernels += 1
        part.gemm_flops += flops
        part.bytes_unfused += sum(t.numel() * t.element_size() for t in tensors)

    def attention(self, q, k, v, attn_mask=None, dropout_p=0.0, is_causal=False, scale=None, **kwargs):
        if dropout_p or kwargs.get("enable_gqa"):
            raise ValueError("cost count: attention with dropout or grouped queries is not modelled")
        return _FusedAttention.apply(self, q, k, v, bool(is_causal and attn_mask is None))

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        out = func(*args, **kwargs)
        if self._paused:
            return out
        packet = func.overloadpacket
        if func.is_view or packet.__name__ in _METADATA:
            return out
        tensors_in = [x for x in tree_flatten((args, kwargs))[0] if isinstance(x, torch.Tensor)]
        tensors_out = [x for x in tree_flatten(out)[0] if isinstance(x, torch.Tensor)]
        part = self._part()
        part.kernels += 1
        part.bytes_unfused += sum(t.numel() * t.element_size() for t in tensors_in + tensors_out)
        if packet in flop_registry:
            flops = flop_registry[packet](*args, **kwargs, out_val=out)
            part.gemm_flops += flops
            if any(t.dtype == torch.float64 for t in tensors_in):
                part.gemm_flops_fp64 += flops
            part.gemm_kernels += 1
        else:
            part.pointwise_ops += sum(t.numel() for t in tensors_out)
        return out


class _FusedAttention(torch.autograd.Function):
    """Stands in for `F.scaled_dot_product_attention` while counting: the shapes of the real call, its cost
    tallied by hand (see the module docstring), nothing dispatched."""

    @staticmethod
    def forward(ctx, counter, q, k, v, causal):
        ctx.counter = counter
        ctx.shapes = (q, k, v)
        out_shape = (*q.shape[:-1], v.shape[-1])
        flops = 2 * q.shape[:-1].numel() * k.shape[-2] * (q.shape[-1] + v.shape[-1]) * (0.5 if causal else 1.0)
        ctx.flops = flops
        with counter.paused():
            out = q.new_empty(out_shape)
        counter.tally_fused(flops, (q, k, v, out))
        return out

    @staticmethod
    def backward(ctx, grad):
        q, k, v = ctx.shapes
        with ctx.counter.paused():
            grads = (torch.empty_like(q), torch.empty_like(k), torch.empty_like(v))
        ctx.counter.tally_fused(2.5 * ctx.flops, (q, k, v, grad, *grads))
        return (None, *grads, None)


@dataclass(frozen=True)
class StepCount:
    """One forward + backward of a model with one decoder layer over `tokens` tokens, split into parts."""

    layer: Tally
    rest: Tally
    tokens: int


def count_step(config, seq_len: int, batch: int = 1, layers: int = 1, device: str = "meta") -> StepCount:
    """Count a forward and backward (loss on every token) of `config`'s causal LM with its layers cut to `layers`.

    `config` is an `atlas_model.AtlasConfig`; the decoder layers of a model are identical, so the model's cost is
    `rest + num_hidden_layers * layer` with one layer counted. `device="cpu"` runs real tensors (random ids), to
    check the `meta` count against the code paths that compute values."""
    from transformers import AutoModelForCausalLM

    import atlas_model  # noqa: F401  (registers the Auto classes)

    cut = config.__class__.from_dict({**config.to_dict(), "num_hidden_layers": layers})
    with torch.device(device):
        model = AutoModelForCausalLM.from_config(cut)
    model.train()
    ids = torch.randint(0, config.vocab_size, (batch, seq_len), device=device)
    tracker = ModuleTracker()
    counter = _Counter(tracker)
    with tracker, counter, mock.patch.object(F, "scaled_dot_product_attention", counter.attention):
        loss = model(input_ids=ids, labels=ids).loss
        loss.backward()
    return StepCount(layer=counter.layer, rest=counter.rest, tokens=batch * seq_len)
