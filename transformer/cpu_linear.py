"""The Linear layers of a model that decodes on the CPU: float32 through oneDNN with weights packed once, or int8.

Decoding spends most of its time in the Linear layers (y = x W^T + b), a few hundred rows at a time. PyTorch's
`F.linear` on the CPU calls a BLAS that re-packs W into its blocked layout on every call; oneDNN (PyTorch's
`mkldnn` ops, the kernels CTranslate2 uses on the CPU) takes W packed once. Same float32 arithmetic, summed in
another order: outputs agree to about 1e-6, and decoding picks the same tokens (tests/test_cpu_linear.py). On the
2-core dev machine it makes beam search about 1.2x faster (docs/benchmarks.md).

Both conversions return a new model for inference only and leave the given one as it is (training goes on with
it): `pack_linears` shares every other parameter with it, `quantize_int8` copies it.
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
        """(..., in) -> (..., out)."""
        return torch.ops.mkldnn._linear_pointwise(x, self.packed_weight, self.bias, "none", [], "")


@functools.cache
def packing_works() -> bool:
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
    if not packing_works():
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
