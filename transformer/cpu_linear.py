"""The Linear layers on the CPU: float32 through oneDNN (training and decoding), or int8 for decoding.

Legend: N rows (B*T positions), I input features, O output features.

PyTorch sends float32 `F.linear` on the CPU to MKL's sgemm, which on AMD CPUs with AVX-512 (the dev machine: AMD
EPYC, Zen 4) runs its AVX2 kernels and re-packs W into its blocked layout on every call; oneDNN (PyTorch's `mkldnn`
ops, the kernels CTranslate2 uses on the CPU) runs AVX-512 ones: about 100 GFLOP/s against 60 to 85. The same
float32 products summed in another order: results agree with MKL's to float32 rounding (tests/test_cpu_linear.py).
- Training: `linear(module, x)` takes the forward product and the input gradient through oneDNN (the weight
  gradient, both operands transposed, stays on MKL, as fast there), in float32 on the CPU while autograd records,
  outside autocast and `torch.compile`; everywhere else it is `module(x)`. `train.onednn_linear` switches it
  (`use_onednn`); modules and state-dict keys stay plain `nn.Linear`.
- Decoding: `pack_linears` gives a copy of the model whose Linear layers hold W packed once (`PackedLinear`),
  sharing every other parameter; `quantize_int8` a copy in int8 (PyTorch's dynamic quantization). Both leave the
  given model as it is (training goes on with it).
Measured gains (docs/benchmarks.md): a training step 1.01-1.03x, beam search about 1.2x.
"""

from __future__ import annotations

import copy
import functools
import warnings

import torch
import torch.nn.functional as F
from torch import nn

_enabled = True


def use_onednn(enabled: bool) -> None:
    """Turn the oneDNN route on or off for this process (the trainer sets it from `train.onednn_linear`)."""
    global _enabled
    _enabled = enabled


def applies(*tensors: torch.Tensor) -> bool:
    """oneDNN takes this float32 CPU product: on, available, outside autocast and torch.compile."""
    return (
        _enabled
        and all(t.device.type == "cpu" and t.dtype == torch.float32 and t.numel() > 0 for t in tensors)
        and not torch.is_autocast_enabled("cpu")
        and not torch.compiler.is_compiling()
        and available()
    )


def _mm_t(a: torch.Tensor, b: torch.Tensor, bias: torch.Tensor | None = None) -> torch.Tensor:
    """a (N, I) @ b (O, I)^T (+ bias (O,)) -> (N, O) through oneDNN; both operands contiguous."""
    return torch.ops.mkldnn._linear_pointwise(a.contiguous(), b.contiguous(), bias, "none", [], "")


def matmul_t(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """a (N, I) @ b (O, I)^T -> (N, O), no autograd (the chunked loss computes its own gradients)."""
    return _mm_t(a, b) if applies(a, b) else a @ b.T


class _Linear(torch.autograd.Function):
    """y = x W^T + b. Forward and dL/dx = dL/dy W through oneDNN; dL/dW = dL/dy^T x and dL/db on MKL."""

    @staticmethod
    def forward(ctx, x, weight, bias):
        ctx.save_for_backward(x, weight)
        ctx.has_bias = bias is not None
        out = _mm_t(x.reshape(-1, x.size(-1)), weight, bias)  # (N, O)
        return out.view(*x.shape[:-1], weight.size(0))

    @staticmethod
    def backward(ctx, grad_out):
        x, weight = ctx.saved_tensors
        g = grad_out.reshape(-1, grad_out.size(-1))  # (N, O)
        grad_x = grad_w = grad_b = None
        if ctx.needs_input_grad[0]:
            grad_x = _mm_t(g, weight.T).view(x.shape)  # (N, I)
        if ctx.needs_input_grad[1]:
            grad_w = g.T @ x.reshape(-1, x.size(-1))  # (O, I)
        if ctx.has_bias and ctx.needs_input_grad[2]:
            grad_b = g.sum(dim=0)  # (O,)
        return grad_x, grad_w, grad_b


def linear(module: nn.Linear, x: torch.Tensor) -> torch.Tensor:
    """module(x) for x (..., I) -> (..., O), through oneDNN while training on the CPU (see the module doc)."""
    if torch.is_grad_enabled() and type(module) is nn.Linear and applies(x, module.weight):
        return _Linear.apply(x, module.weight, module.bias)
    return module(x)


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
