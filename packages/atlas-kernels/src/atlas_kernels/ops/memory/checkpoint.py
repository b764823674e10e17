"""Recomputation in the torch chunk op (docs/chunkwise.md, "Checkpointing"): when it checkpoints by default, and the
two-level scheme of `MemoryConfig.checkpoint_group`.

A group of G chunks is one hand-written autograd node (`_Group`) that keeps only its inputs: the chunks' inputs, the
state it starts from and the parameters. Its backward reruns the G chunks on those inputs and differentiates them.
An outer `torch.utils.checkpoint` would do the same arithmetic, but it keeps every chunk's autograd graph from the
forward until the backward (about 540 nodes and 210 saved-tensor holders per chunk at B=2, H=4, D=32), which grew
with T as fast as the boundary states it was meant to drop.
"""

from __future__ import annotations

from collections.abc import Callable

import torch

from atlas_kernels.config import MemoryConfig
from atlas_kernels.ops.memory.inputs import OpInputs
from atlas_kernels.ops.memory.state import MemoryState

_FIELDS = tuple(OpInputs.__dataclass_fields__)

# chunk._run_chunks: (chunks, state, params, cfg, checkpoint each chunk) -> (outputs, end state, state before the last)
RunChunks = Callable[..., tuple[list[torch.Tensor], MemoryState, MemoryState]]


def default_checkpoint(x: OpInputs, params: dict[str, torch.Tensor], state: MemoryState, cfg: MemoryConfig) -> bool:
    """Checkpoint Muon chunks when autograd records the op and the segment is large.

    Muon materialises S_j, the Newton-Schulz iterates and W_j for every token of a chunk, and autograd keeps
    them all: about 5.4 GB per 1k positions at B=2, H=4, D=32 (30 GB with poly p=2), so Atlas at 4K context
    does not fit without recomputation. The chunk-boundary states cost |W| per chunk instead of per token.
    A small segment (T x the state's bytes under cfg.checkpoint_min_mib) keeps its intermediates instead: the
    recomputation would cost a chunk forward per chunk to save memory nobody lacks. The gd / momentum paths keep
    only per-token activations (vectors, not weights) and do not pay for the recomputation by default.
    """
    if cfg.optimizer != "muon" or not torch.is_grad_enabled():
        return False
    inputs = [getattr(x, n) for n in _FIELDS] + list(params.values()) + list(state.tensors().values())
    if not any(t.requires_grad for t in inputs):
        return False
    return segment_state_bytes(x, state) > cfg.checkpoint_min_mib * 2**20


def segment_state_bytes(x: OpInputs, state: MemoryState) -> int:
    """T x the bytes of one state (weights, momenta, window): what `default_checkpoint` compares with its threshold."""
    return x.k.shape[2] * sum(t.numel() * t.element_size() for t in state.tensors().values())


def checkpoint_groups(
    run_chunks: RunChunks,
    chunks: list[OpInputs],
    group: int,
    state: MemoryState,
    params: dict[str, torch.Tensor],
    cfg: MemoryConfig,
) -> tuple[list[torch.Tensor], MemoryState, MemoryState]:
    """`run_chunks` over `chunks`, `group` at a time, each group one `_Group` node -> (the chunks' outputs, the end
    state, the state before the last chunk), as `run_chunks` over all of them returns."""
    names, pnames = tuple(state.tensors()), tuple(params)
    s = len(names)
    outputs, start = [], state
    for i in range(0, len(chunks), group):
        part = chunks[i : i + group]
        n = len(part)
        flat = [getattr(xc, f) for xc in part for f in _FIELDS] + [*state.tensors().values(), *params.values()]
        out = _Group.apply(run_chunks, cfg, (n, names, pnames), *flat)
        outputs += out[:n]
        state = MemoryState.from_tensors(dict(zip(names, out[n : n + s])))
        start = MemoryState.from_tensors(dict(zip(names, out[n + s : n + 2 * s])))
        # The next group takes the parameters from this one's outputs: autograd then adds their gradients in the
        # order one graph over all chunks would (the later chunks' first), so G > 1 matches G = 1 bit for bit.
        params = dict(zip(pnames, out[n + 2 * s :]))
    return outputs, state, start


class _Group(torch.autograd.Function):
    """G chunks as one autograd node that saves only its inputs; the backward reruns the chunks, then differentiates
    them. Inputs (flat): each chunk's `OpInputs` fields, the start state (`MemoryState.tensors()` order), the
    parameters. Outputs: each chunk's y, the end state, the state before the last chunk, the parameters again."""

    @staticmethod
    def forward(ctx, run_chunks: RunChunks, cfg: MemoryConfig, layout, *flat: torch.Tensor):
        ctx.run_chunks, ctx.cfg, ctx.layout = run_chunks, cfg, layout
        ctx.save_for_backward(*flat)
        ctx.set_materialize_grads(False)
        # Run with grad so that each output's requires_grad says whether it depends on an input that requires grad;
        # the graph is dropped here and rebuilt in the backward.
        out = [(t.detach(), t.requires_grad) for t in _group_outputs(run_chunks, cfg, layout, _leaves(flat), False)]
        ctx.mark_non_differentiable(*(t for t, differentiable in out if not differentiable))
        return tuple(t for t, _ in out)

    @staticmethod
    def backward(ctx, *grads):
        # Under create_graph (grad mode on here) the rerun starts from the saved inputs themselves, so that the
        # gradients it returns are differentiable; otherwise from detached copies.
        higher = torch.is_grad_enabled()
        inputs = list(ctx.saved_tensors) if higher else _leaves(ctx.saved_tensors)
        out = _group_outputs(ctx.run_chunks, ctx.cfg, ctx.layout, inputs, True)
        roots = [(t, g) for t, g in zip(out, grads) if g is not None]
        wanted = [t for t in inputs if t.requires_grad]
        got = iter(())
        if roots and wanted:
            outs, gs = zip(*roots)
            got = iter(torch.autograd.grad(outs, wanted, gs, allow_unused=True, create_graph=higher))
        return None, None, None, *(next(got, None) if t.requires_grad else None for t in inputs)


def _leaves(tensors) -> list[torch.Tensor]:
    """Detached copies that require grad where the originals do (so that the same outputs require grad)."""
    return [t.detach().requires_grad_(t.requires_grad) for t in tensors]


def _group_outputs(run_chunks: RunChunks, cfg: MemoryConfig, layout, flat: list[torch.Tensor], rerun: bool):
    """`_Group`'s outputs from its flat inputs, with autograd recording. In the backward's rerun the last chunk runs
    without its own checkpoint: it is differentiated first, so its intermediates would be recomputed at once."""
    n, names, pnames = layout
    w = len(_FIELDS)
    chunks = [OpInputs(*flat[i : i + w]) for i in range(0, n * w, w)]
    state = MemoryState.from_tensors(dict(zip(names, flat[n * w : n * w + len(names)])))
    params = dict(zip(pnames, flat[n * w + len(names) :]))
    with torch.enable_grad():
        last = n - 1 if rerun else n
        ys, end, start = run_chunks(chunks[:last], state, params, cfg, True)
        if rerun:
            y, end, start = run_chunks(chunks[last:], end, params, cfg, False)
            ys = ys + y
        # made after the chunks ran, so that in the backward the later groups' parameter gradients arrive first
        aliases = [p.view_as(p) for p in params.values()]
    return [*ys, *end.tensors().values(), *start.tensors().values(), *aliases]
