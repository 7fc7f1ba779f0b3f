"""Copies of a model for decoding on the CPU, their Linear layers faster than `nn.Linear`: float32 with the weights
packed once for oneDNN, or int8.

Legend: N rows, I input features, O output features.

PyTorch sends float32 `F.linear` on the CPU to MKL's sgemm, which re-packs W into its blocked layout on every call;
decoding calls each layer once per step with few rows, so the packing is much of the cost. `pack_linears` gives a
copy whose Linear layers hold W packed once in oneDNN's layout (`PackedLinear`, the kernels CTranslate2 uses on the
CPU): the same products summed in another order, the same tokens (tests/test_cpu_linear.py). `quantize_int8` gives
a copy in int8 (PyTorch's dynamic quantization). Both leave the given model as it is (training goes on with it).
Measured gain of the packed copy, beam 4: 1.51x with AVX-512, 1.13x with AVX2 only (docs/benchmarks.md#decoding-speed).

Memory: oneDNN builds a kernel for every row count it is called with and keeps it (two caches of up to 1,024 each;
about 0.5-1.5 MB per row count and layer shape), and decoding calls with ever new row counts (B x S in the encoder,
the rows still alive in each step): unpadded, a demo-sized model grew by 1.1 GB over 24,000 lines. Rows padded by
`padded_rows` (four steps per octave) leave at most 48 row counts per layer shape up to 8,192 rows, so the copy's
memory stops growing once it has met them, at about the speed of unpadded rows and with the same tokens, where
padding to powers of two wastes more rows and time (memory and time of each: docs/benchmarks.md#decoding-speed and
docs/benchmarks.md#data-memory-and-start-up).
"""

from __future__ import annotations

import copy
import functools
import warnings

import torch
import torch.nn.functional as F
from torch import nn


class PackedLinear(nn.Module):
    """y = x W^T + b with W packed once in oneDNN's layout: float32, CPU, inference only (no gradient)."""

    def __init__(self, weight: torch.Tensor, bias: torch.Tensor | None) -> None:
        """weight (out, in) and bias (out,) or None, as nn.Linear holds them."""
        super().__init__()
        self.out_features, self.in_features = weight.shape
        self.packed_weight = torch.ops.mkldnn._reorder_linear_weight(weight.detach(), None)  # (out, in), blocked
        self.bias = None if bias is None else bias.detach()  # (out,)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """(..., in) -> (..., out), through zero rows added up to `padded_rows` (see the module docstring)."""
        N = x.shape[:-1].numel()
        rows = padded_rows(N)
        flat = x.reshape(N, self.in_features)  # (N, I)
        if rows > N:
            flat = F.pad(flat, (0, 0, 0, rows - N))  # (rows, I)
        out = torch.ops.mkldnn._linear_pointwise(flat, self.packed_weight, self.bias, "none", [], "")  # (rows, O)
        return out[:N].view(*x.shape[:-1], self.out_features)  # (..., O)


def padded_rows(n: int) -> int:
    """n rows rounded up to one of four steps per octave: n itself up to 8, then for n in (2^k, 2^(k+1)] the next
    multiple of 2^(k-2) (9..16 -> 10, 12, 14, 16; 17..32 -> 20, 24, 28, 32; ...): at most 25% more rows."""
    if n <= 8:
        return n
    step = 1 << ((n - 1).bit_length() - 3)
    return -(-n // step) * step


@functools.cache
def available() -> bool:
    """Whether this PyTorch build has the oneDNN ops and they compute F.linear (tried once on a small layer, with
    fixed values: the random streams that training and sampling draw from stay untouched)."""
    weight, bias, x = (
        torch.linspace(-1, 1, 40).view(5, 8),
        torch.linspace(0, 1, 5),
        torch.linspace(-2, 2, 24).view(3, 8),
    )
    try:
        return torch.allclose(PackedLinear(weight, bias)(x), F.linear(x, weight, bias), atol=1e-5)
    except (AttributeError, RuntimeError, NotImplementedError):
        return False


def pack_linears(model: nn.Module) -> nn.Module:
    """A copy of `model` (on the CPU, float32) whose nn.Linear layers are `PackedLinear`s, sharing every parameter
    and buffer with `model`; `model` itself when this build cannot pack."""
    if not available():
        return model
    memo: dict[int, object] = {id(t): t for t in [*model.parameters(), *model.buffers()]}  # shared, not copied
    memo |= {id(m): PackedLinear(m.weight, m.bias) for m in model.modules() if type(m) is nn.Linear}
    return copy.deepcopy(model, memo)


def quantize_int8(model: nn.Module) -> nn.Module:
    """A copy of `model` whose nn.Linear layers run in int8 (weights per channel, activations quantized per batch).

    `torch.ao.quantization.quantize_dynamic`, CPU only; embeddings, LayerNorm and attention stay float32.
    """
    from torch.ao.quantization import quantize_dynamic

    with warnings.catch_warnings():  # torch >= 2.10 points to torchao; torch.ao still works and needs nothing more
        warnings.simplefilter("ignore")
        return quantize_dynamic(copy.deepcopy(model).cpu().eval(), {nn.Linear}, dtype=torch.qint8)
