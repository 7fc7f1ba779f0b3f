"""Training matmuls on the CPU through oneDNN instead of MKL: the same products, faster kernels.

Legend: N rows (B*T positions), I input features, O output features.

PyTorch sends float32 `F.linear` and `@` on the CPU to MKL's sgemm. On an AMD CPU with AVX-512 (this project's dev
machine: AMD EPYC, Zen 4) MKL takes a generic code path, while oneDNN (`torch.ops.mkldnn._linear_pointwise`) runs
its AVX-512 kernels: at training shapes (4096 rows, 256 to 2048 features) 82 to 104 GFLOP/s against 60 to 83 for
the forward product and the input gradient; the weight gradient would need both operands transposed into
oneDNN's layout, and with those copies MKL is faster, so it stays there (docs/benchmarks.md). Nothing else
changes: the results equal MKL's up to float32 rounding (tested), the modules and their state-dict keys are plain
`nn.Linear`.

`linear(module, x)` uses oneDNN only where it applies: float32 on the CPU, autograd recording (training;
inference and decoding keep `module(x)`, so int8 `quantize_dynamic` copies work as before), outside autocast and
`torch.compile`, with the operator present (torch builds with oneDNN). `use_onednn(False)` turns it off
(`train.onednn_linear`); everywhere else the call is `module(x)`.
"""

from __future__ import annotations

import torch
from torch import nn

_enabled = True


def use_onednn(enabled: bool) -> None:
    """Turn the oneDNN route on or off for this process (the trainer sets it from `train.onednn_linear`)."""
    global _enabled
    _enabled = enabled


def available() -> bool:
    """True when this torch has oneDNN and its fp32 linear operator."""
    return torch.backends.mkldnn.is_available() and hasattr(torch.ops.mkldnn, "_linear_pointwise")


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
