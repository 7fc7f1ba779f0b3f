"""The CPU's name in every results file: model name, family and model, widest vector instructions (devices.py)."""

from __future__ import annotations

import pytest

from transformer.devices import cpu_model, cpu_name

# Two processors as Linux's /proc/cpuinfo writes them (fields abridged, tabs as the kernel puts them): the name is
# read from the first one only.
ZEN3 = """processor\t: 0
vendor_id\t: AuthenticAMD
cpu family\t: 25
model\t\t: 1
model name\t: AMD EPYC
flags\t\t: fpu sse2 avx avx2 fma bmi2

processor\t: 1
vendor_id\t: AuthenticAMD
cpu family\t: 25
model\t\t: 1
model name\t: AMD EPYC
flags\t\t: fpu sse2 avx avx2 fma bmi2
"""


@pytest.mark.parametrize(
    ("cpuinfo", "expected"),
    [
        (ZEN3, "AMD EPYC, family 25 model 1, AVX2"),
        (
            ZEN3.replace("model\t\t: 1", "model\t\t: 17").replace("bmi2", "bmi2 avx512f avx512bw"),
            "AMD EPYC, family 25 model 17, AVX-512",
        ),
        (ZEN3.replace(" avx avx2", ""), "AMD EPYC, family 25 model 1, no AVX2"),
        ("processor\t: 0\nmodel name\t: Some CPU\n", "Some CPU"),  # no family, model or flags: the name alone
    ],
)
def test_cpu_model_names_the_generation_and_the_vector_instructions(cpuinfo, expected):
    assert cpu_model(cpuinfo) == expected


def test_cpu_model_without_cpuinfo_falls_back_to_platform():
    assert cpu_model("")  # platform's processor or machine: never empty


def test_cpu_name_counts_the_cores_this_process_may_use():
    assert cpu_name().endswith(f"-core CPU ({cpu_model()})")
    assert int(cpu_name().split("-")[0]) >= 1
