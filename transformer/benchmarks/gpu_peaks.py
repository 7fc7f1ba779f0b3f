"""The dense bf16 peak of a GPU, read from the name torch gives it, for the model FLOPs utilisation (MFU) of
`make bench-gpu`: the vendor's figure without sparsity. An H100 is an SXM part unless its name says PCIe or NVL
(torch names the SXM one 'NVIDIA H100 80GB HBM3'); the H200 and GH200 have the H100 SXM's tensor cores and clocks.
"""

from __future__ import annotations

# (what the name contains, lower case; TFLOP/s; what it is), the first match wins: the longer names first
PEAKS = (
    ("h100 pcie", 756.0, "H100 PCIe, dense bf16"),
    ("h100 nvl", 835.0, "H100 NVL, dense bf16"),
    ("gh200", 989.0, "GH200 (H100 SXM tensor cores), dense bf16"),
    ("h200", 989.0, "H200 (H100 SXM tensor cores), dense bf16"),
    ("h100", 989.0, "H100 SXM, dense bf16"),
    ("b200", 2250.0, "B200, dense bf16"),
    ("a100", 312.0, "A100, dense bf16"),
    ("l40s", 362.0, "L40S, dense bf16"),
    ("l4", 121.0, "L4, dense bf16"),
    ("a10g", 70.0, "A10G, dense bf16"),
)


def peak_tflops(device_name: str) -> tuple[float, str] | None:
    """(dense bf16 TFLOP/s, what that figure is) for a GPU's name, or None for a GPU not in `PEAKS`."""
    name = device_name.lower()
    return next(((tflops, what) for key, tflops, what in PEAKS if key in name), None)
