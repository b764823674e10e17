"""The Triton kernels of the memory op, by memory kind: `linear` (launch) with `linear_kernels`, `mlp` (launch)
with `mlp_kernels` (forward) and `mlp_bwd`, the stages both share (`stages`), the launch checks (`support`) and
the correctness checks a GPU machine runs (`checks`, `mlp_checks`). The torch op they match is `..chunk`."""
