"""What `make mutants` mutates: each module's file, the tests that exercise it (never the whole suite) and, where
only part of a file is meant, its scope. `tests/test_mutants_config.py` checks that every test id still exists
and every scope marker is still in its file.
"""

from __future__ import annotations

from dataclasses import dataclass, field

EXP = "packages/atlas-experiments"
KERN = "packages/atlas-kernels"


@dataclass(frozen=True)
class Module:
    path: str
    tests: tuple[str, ...]
    tests_dir: str  # hashed by mutmut: a change there reruns the module's mutants
    # (first line containing a, last line containing b) pairs; mutants outside every range are skipped
    scope: tuple[tuple[str, str], ...] = ()
    pytest_args: tuple[str, ...] = field(default=())


# The chunk op against the oracles: chunks of 4 over T = 11 with a window of 3 reaching across chunk edges, outputs,
# state and every input gradient (each config a few seconds; the whole grid is 42).
_GRAD = f"{KERN}/tests/test_memory_equivalence.py::test_chunk_equals_naive_chunked_with_gradients"
_GAMMA = f"{KERN}/tests/test_gamma_window.py::test_chunk_equals_oracle_with_gradients"  # gamma="per_step"
_WINDOW = ("linear-gd-identity-l2", "mlp-momentum-identity-l2", "mlp-gd-poly-dot", "linear-muon-identity-l2")
_CHUNK_CONFIGS = (  # every memory, optimizer, feature map and bias at least once
    "linear-gd-identity-l2",
    "mlp-momentum-poly-dot",
    "gated_mlp-muon-identity-l2",
    "mlp-gd-exp-l2",
    "linear-momentum-identity-dot",
    "gated_mlp-gd-exp-dot",
    "mlp-muon-poly-l2",
    "gated_mlp-momentum-poly-l2",
)

_CHUNK_TESTS = (
    f"{KERN}/tests/test_chunk_op_edges.py",
    f"{KERN}/tests/test_gradcheck_and_errors.py::test_low_precision_inputs_are_accumulated_in_float32",
    *(f"{_GRAD}[{c}-c3-b4]" for c in _CHUNK_CONFIGS),
    *(f"{_GAMMA}[7-3-4-{c}]" for c in _WINDOW),
    f"{KERN}/tests/test_memory_equivalence.py::test_exp_dual_coefficients_across_chunk_edges",
    f"{KERN}/tests/test_memory_equivalence.py::test_decay_first_chunked_with_gradients",
    f"{KERN}/tests/test_memory_equivalence.py::test_chunk16_equals_naive_chunked",
    f"{KERN}/tests/test_decay_target.py::test_chunk_matches_oracle",
    f"{KERN}/tests/test_norm_placement.py::test_chunk_matches_oracle",
    f"{KERN}/tests/test_exact_delta_and_read.py::test_exact_delta_equals_recurrence_with_gradients",
    f"{KERN}/tests/test_segments_and_decoding.py::test_segments_and_decoding_match_one_call",
    f"{KERN}/tests/test_checkpoint.py",
    # the materialising Muon path (`_muon_chunk`): no default config reaches it since the factored path became
    # the default; this compares the two in float64
    f"{KERN}/tests/test_muon_lowrank.py::test_lowrank_equals_materialised",
    # which Muon path runs (both give the same numbers): only the saved-tensor sizes tell them apart
    f"{KERN}/tests/test_muon_lowrank.py::test_lowrank_never_forms_per_token_weights",
    f"{KERN}/tests/test_muon_lowrank.py::test_lowrank_equals_materialised_variants",  # decay target, gamma, ...
    f"{KERN}/tests/test_ns_form.py::test_chunk_op_runs_the_form_it_names",
    f"{KERN}/tests/test_ns_form_auto.py",  # ns_form="auto": which path runs, by size and device
    # the approximate Muon with ns_form="materialise" still takes the factored path
    f"{KERN}/tests/test_muon_chunk_polynomial.py::test_chunk_op_matches_the_literal_recurrence[T7-mlp-muon-poly-l2-c2-b4]",
    f"{KERN}/tests/test_exact_delta_and_read.py::test_exact_delta_with_window_gates_and_values_narrower_than_a_chunk",
    f"{KERN}/tests/test_decay_target.py::test_exp_features_without_init_keys_decay_the_explicit_layers_toward_w0",
    # keys and queries through the feature dispatcher (the Triton kernel on a GPU)
    f"{KERN}/tests/test_subop_dispatch.py::test_forced_triton_subops_match_the_torch_references[linear-gd-poly-T7]",
)

MODULES: dict[str, Module] = {
    "decision": Module(
        f"{EXP}/src/atlas_experiments/study/decision.py",
        (
            f"{EXP}/tests/test_study_decision.py",
            f"{EXP}/tests/test_study_decision_boundaries.py",
            f"{EXP}/tests/test_study_claims.py::test_judge_a_registered_claim",
            f"{EXP}/tests/test_study_claims.py::test_judge_an_ordering_needs_every_step",
            f"{EXP}/tests/test_study_claims.py::test_judge_checks_registered_seeds_and_testability",
        ),
        f"{EXP}/tests",
        pytest_args=("--noconftest",),  # plain Python: skip the root conftest's torch import (seconds per mutant)
    ),
    "loader": Module(
        "packages/atlas-data/src/atlas_data/loader.py",
        ("packages/atlas-data/tests/test_loader.py", "packages/atlas-data/tests/test_loader_edges.py"),
        "packages/atlas-data/tests",
    ),
    "optim": Module(
        f"{EXP}/src/atlas_experiments/train/optim.py",
        (
            f"{EXP}/tests/test_optim_schedule.py",
            f"{EXP}/tests/test_optim_groups.py",
            # the fastest golden run: its losses move with any change of the schedule or of set_lr
            f"{EXP}/tests/test_golden.py::test_golden_losses[transformer_pp_tiny]",
        ),
        f"{EXP}/tests",
    ),
    "checkpoint": Module(
        f"{EXP}/src/atlas_experiments/train/checkpoint.py",
        (
            f"{EXP}/tests/test_checkpoint_files.py",
            f"{EXP}/tests/test_resume.py",
            f"{EXP}/tests/test_train.py::test_crash_during_checkpoint_save_leaves_previous_loadable",
        ),
        f"{EXP}/tests",
    ),
    "loop-resume": Module(
        f"{EXP}/src/atlas_experiments/train/loop.py",
        (
            f"{EXP}/tests/test_resume.py",
            f"{EXP}/tests/test_resume_paths.py",
            f"{EXP}/tests/test_train.py::test_crash_during_checkpoint_save_leaves_previous_loadable",
        ),
        f"{EXP}/tests",
        scope=(
            ("def _finished_run(", 'log.info("resumed from'),
            ("metrics.truncate_after(counters.step)", "metrics.truncate_after(counters.step)"),
            ("def save(name: str, keep: int | None)", "barrier(info)"),
            ("if cfg.checkpoint_interval and step %", "save(ckpt.step_name(step)"),
            ('save("final", None)', 'save("final", None)'),
        ),
    ),
    "coefficients": Module(
        f"{KERN}/src/atlas_kernels/ops/memory/coefficients.py",
        (
            f"{KERN}/tests/test_chunk_coefficients.py",
            # a fast config first (most mutants die there), then every memory x optimizer x feature x bias
            f"{_GRAD}[linear-gd-identity-l2-c3-b4]",
            f"{_GRAD}[linear-momentum-identity-l2-c3-b4]",
            _GRAD,
            f"{KERN}/tests/test_memory_equivalence.py::test_chunk16_equals_naive_chunked",
            *(f"{_GAMMA}[7-3-4-{c}]" for c in _WINDOW),
        ),
        f"{KERN}/tests",
    ),
    "chunk": Module(f"{KERN}/src/atlas_kernels/ops/memory/chunk.py", _CHUNK_TESTS, f"{KERN}/tests"),
    # the part of chunk.py the first chunk run did not reach in its time budget: one chunk's step and the forms
    # it dispatches to (dual, materialising Muon, decay-first, decay target); its own cache, so it runs alone
    "chunk-tail": Module(
        f"{KERN}/src/atlas_kernels/ops/memory/chunk.py",
        _CHUNK_TESTS,
        f"{KERN}/tests",
        scope=(("def _chunk_step(", 'return y, {"W": W}'),),
    ),
    "muon-lowrank": Module(
        f"{KERN}/src/atlas_kernels/ops/memory/muon_lowrank.py",
        (
            # factored vs materialised Muon in float64 over the memory x features x bias x window grid first
            f"{KERN}/tests/test_muon_lowrank.py",
            f"{KERN}/tests/test_muon_chunk_polynomial.py",
            f"{KERN}/tests/test_ns_form_auto.py",  # uses_factored_path
        ),
        f"{KERN}/tests",
    ),
}
