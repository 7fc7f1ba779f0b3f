"""One precision rule for training, translation and evaluation: which autocast dtype a setting means on a device.

The values are `config.PRECISIONS` (the `Precision` Literal of `TrainConfig.precision` and
`DecodeConfig.precision`). The rule, the same for every command:
- fp32: no autocast. bf16: `torch.autocast` in bfloat16, on CUDA and on the CPU alike. fp16: CUDA only (float16
  autocast with a gradient scaler when training); asked for on another device it is refused before any work.
- auto: bf16 on a CUDA device that supports it, else fp32.
Parameters and the optimizer stay float32 under every setting.
"""

from __future__ import annotations

import contextlib

import torch

from transformer.config import PRECISIONS
from transformer.errors import UserError

DTYPES = {"fp32": None, "bf16": torch.bfloat16, "fp16": torch.float16}  # resolved precision -> autocast dtype


def resolve_precision(precision: str, device: torch.device, *, setting: str = "precision") -> str:
    """'auto' -> bf16 on a GPU that supports it, else fp32; fp16 off CUDA is a `UserError` naming `setting`."""
    if precision not in PRECISIONS:
        raise UserError(f"unknown {setting} {precision!r}: use one of {', '.join(PRECISIONS)}")
    if precision == "fp16" and device.type != "cuda":
        raise UserError(f"{setting} fp16 needs a CUDA device; on the CPU use fp32 or bf16")
    if precision == "auto":
        return "bf16" if device.type == "cuda" and torch.cuda.is_bf16_supported() else "fp32"
    return precision


def autocast(precision: str, device: torch.device) -> contextlib.AbstractContextManager:
    """torch.autocast for a resolved bf16/fp16; a no-op for fp32."""
    dtype = DTYPES[precision]
    return torch.autocast(device_type=device.type, dtype=dtype) if dtype else contextlib.nullcontext()
