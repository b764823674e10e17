"""The offline compile report's parts that need no compile (the compiles themselves: test_triton_compile_sm90.py,
slow)."""

import pytest

from atlas_kernels.ops.triton_offline import main, parse_ptxas


def test_ptxas_usage_is_read_from_its_verbose_output():
    text = (
        "ptxas info    : Compiling entry function '_linear_bwd_kernel' for 'sm_90a'\n"
        "ptxas info    : Function properties for _linear_bwd_kernel\n"
        "    2644 bytes stack frame, 2644 bytes spill stores, 3052 bytes spill loads\n"
        "ptxas info    : Used 255 registers, used 1 barriers, 2644 bytes cumulative stack size\n"
    )
    assert parse_ptxas(text) == (255, 2644, 3052)
    with pytest.raises(ValueError, match="register or spill"):
        parse_ptxas("ptxas fatal   : Unresolved extern function")


def test_an_unknown_linear_variant_is_refused_by_name(capsys):
    with pytest.raises(SystemExit):
        main(["linear", "gated_delta", "bwd", "64"])
    assert "'gated_delta'" in capsys.readouterr().err
