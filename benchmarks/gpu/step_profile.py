"""Where one forward + backward step's time goes: kernels launched, time the device was busy, and the busiest kernel.

The issue this answers: the memory ops ran at 0.1-0.3% of the matmul roof on an H200 and the reading was
"latency-bound" (thousands of small kernels per chunk, in sequence), which no measurement has shown yet. One step
under torch.profiler gives, per timing row:

- kernels per step: device operations launched, kernels with the memsets and copies (on a CPU, the smoke run:
  top-level aten calls, each of which is at least one kernel on a GPU);
- busy ms: the summed duration of those kernels (one stream, so they do not overlap);
- busy share: busy ms over the row's timed fwd + bwd ms. Near 100%: the kernels themselves are slow (fuse or retile
  them). Far below: the device waits on the host between launches (CUDA graphs, fewer launches);
- the busiest kernel and its share of busy ms: for a Triton op, whether the hand-written kernel or the torch code
  around it (gate coefficients, partial sums, halo scatter) takes the time.

The profiled step runs after the row's timed calls (it adds the profiler's overhead to nothing that is reported as
a timing).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch.autograd import DeviceType
from torch.profiler import ProfilerActivity, profile


@dataclass(frozen=True)
class StepProfile:
    kernels: int
    busy_ms: float
    top_name: str
    top_ms: float

    def cells(self, step_ms: float) -> list[str]:
        """Table cells: kernels, busy ms, busy share of the timed step, busiest kernel (its share of busy)."""
        if self.kernels == 0:  # e.g. the profiler could not attach to the GPU (CUPTI refused): not a 0% busy GPU
            return ["none recorded (the profiler saw no kernels)", "", "", ""]
        share = f"{100 * self.busy_ms / step_ms:.0f}%" if step_ms > 0 else "n/a"
        top = f"`{short(self.top_name)}` ({100 * self.top_ms / self.busy_ms:.0f}%)" if self.busy_ms > 0 else "n/a"
        return [f"{self.kernels:,}", f"{self.busy_ms:.2f}", share, top]


def short(name: str, width: int = 48) -> str:
    """A kernel name short enough for a table cell (template arguments and signatures dropped)."""
    name = name.split("(")[0].split("<")[0].replace("|", "/")
    return name if len(name) <= width else name[: width - 3] + "..."


def summarize(events, on_cuda: bool) -> StepProfile:
    """The profile of a step from torch.profiler's function events."""
    times: dict[str, float] = {}
    kernels = 0
    for ev in events:
        if on_cuda:
            # a record_function range shows on the GPU timeline too: it spans kernels, it is none
            if ev.device_type != DeviceType.CUDA or getattr(ev, "is_user_annotation", False):
                continue
        else:
            parent = ev.cpu_parent
            if not ev.name.startswith("aten::") or (parent is not None and parent.name.startswith("aten::")):
                continue
        us = float(ev.time_range.elapsed_us())  # a device event's range is the kernel's own run
        kernels += 1
        times[ev.name] = times.get(ev.name, 0.0) + us
    if not times:
        return StepProfile(0, 0.0, "none", 0.0)
    top = max(times, key=times.__getitem__)
    return StepProfile(kernels, sum(times.values()) / 1e3, top, times[top] / 1e3)


def profile_step(step) -> StepProfile:
    """One call of `step` (already warmed: nothing compiles inside) under the profiler."""
    on_cuda = torch.cuda.is_available()
    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if on_cuda else [])
    with profile(activities=activities) as prof:
        step()
        if on_cuda:
            torch.cuda.synchronize()
    return summarize(prof.events(), on_cuda)
