"""The label-smoothed cross-entropy (paper section 5.4): from full logits, and chunk by chunk from decoder states.

Legend: B batch, T target length, N rows (the real, non-pad target positions of a batch), D d_model, V vocabulary,
C rows per chunk.

`label_smoothed_loss` takes logits (B, T, V) and builds float32 log-probabilities of the same size: for the base
model, 25k target tokens and V = 37k that is 3.7 GB written and read several times, padding included. It is the
reference, and what validation uses.
`chunked_label_smoothed_loss` takes the decoder states of the real target positions (N, D) and the output
projection (V, D) instead. For C rows at a time it computes the logits in the compute dtype, their float32
log-sum-exp and the loss, and, since the loss is the last operation of the forward pass, the gradients with respect
to the states and the weight right away (the fused linear cross-entropy of Liger Kernel); backward only scales them.
The (N, V) logits and log-probabilities never exist: the peak extra memory is one (C, V) float32 chunk.
Measured gain: memory, not time: the base shape's 25k targets x 37k vocabulary are 3.7 GB of float32
log-probabilities, a chunk 256 MB; a CPU training step is 1.02-1.03x the full-logits one (docs/benchmarks.md).

With z the logits of one row, lse = logsumexp(z), p = softmax(z) and y the reference:
    nll  = lse - z_y
    loss = (1 - eps) * nll + eps * (lse - mean_v z_v)      (= label_smoothed_loss)
    dloss/dz = p - (1 - eps) * onehot(y) - eps / V
"""

from __future__ import annotations

import torch

# Rows per chunk: C x V float32 stays near 256 MB (C = 1,813 for V = 37,000), whatever the batch size.
CHUNK_ELEMENTS = 2**26


def label_smoothed_loss(
    logits: torch.Tensor, target: torch.Tensor, *, epsilon: float, pad_id: int
) -> tuple[torch.Tensor, torch.Tensor]:
    """Summed label-smoothed cross-entropy and summed NLL over the non-pad targets.

    logits (B, T, V) any float dtype, target (B, T) ids. The smoothed target puts 1 - epsilon + epsilon/V on the
    reference token and epsilon/V on every token of the vocabulary (Szegedy et al. 2016, as in PyTorch's
    `cross_entropy(label_smoothing=...)` and fairseq): loss = (1 - epsilon) * NLL + epsilon * mean_v(-log p_v).
    The NLL alone gives the perplexity. Computed in float32 whatever the autocast dtype.
    """
    log_probs = logits.float().log_softmax(dim=-1).flatten(0, 1)  # (B*T, V)
    target = target.flatten()  # (B*T,)
    keep = target != pad_id
    nll = -log_probs.gather(1, target[:, None]).squeeze(1)  # (B*T,)
    smooth = -log_probs.mean(dim=-1)  # (B*T,)
    loss = (1.0 - epsilon) * nll + epsilon * smooth
    return loss[keep].sum(), nll[keep].sum()


def _compute_dtype(device: torch.device, dtype: torch.dtype) -> torch.dtype:
    """The autocast dtype when autocast is on for `device`, else `dtype` (the states' own)."""
    if torch.is_autocast_enabled(device.type):  # the device-type forms exist since torch 2.4
        return torch.get_autocast_dtype(device.type)
    return dtype


class _ChunkedLoss(torch.autograd.Function):
    @staticmethod
    def forward(ctx, hidden, weight, target, epsilon: float, chunk: int, compute_dtype, with_grad: bool):
        N, V = hidden.size(0), weight.size(0)
        h, w = hidden.to(compute_dtype), weight.to(compute_dtype)  # (N, D), (V, D)
        loss = torch.zeros((), dtype=torch.float32, device=hidden.device)
        nll = torch.zeros((), dtype=torch.float32, device=hidden.device)
        grad_h = torch.empty_like(h) if with_grad else None  # (N, D)
        grad_w = torch.zeros(weight.shape, dtype=torch.float32, device=weight.device) if with_grad else None
        for start in range(0, N, chunk):
            h_c, y_c = h[start : start + chunk], target[start : start + chunk]  # (C, D), (C,)
            z = (h_c @ w.T).float()  # (C, V)
            z_y, z_mean = z.gather(1, y_c[:, None]).squeeze(1), z.mean(dim=-1)  # (C,) each
            z_max = z.amax(dim=-1, keepdim=True)  # (C, 1)
            e = z.sub_(z_max).exp_()  # (C, V): exp(z - max), in place of z: one exp serves the loss and p
            total = e.sum(dim=-1, keepdim=True)  # (C, 1)
            lse = (z_max + total.log()).squeeze(1)  # (C,), as torch.logsumexp computes it
            nll_c = lse - z_y  # (C,)
            loss += ((1.0 - epsilon) * nll_c + epsilon * (lse - z_mean)).sum()
            nll += nll_c.sum()
            if with_grad:
                g = torch.addcmul(e.new_full((), -epsilon / V), e, total.reciprocal(), out=e)  # (C, V): p - eps/V
                g[torch.arange(len(y_c), device=g.device), y_c] -= 1.0 - epsilon
                g = g.to(compute_dtype)
                grad_h[start : start + chunk] = g @ w  # (C, D)
                grad_w += (g.T @ h_c).float()  # (V, D)
        ctx.mark_non_differentiable(nll)
        ctx.save_for_backward(grad_h, grad_w)
        ctx.dtypes = hidden.dtype, weight.dtype
        return loss, nll

    @staticmethod
    def backward(ctx, grad_loss, grad_nll):
        grad_h, grad_w = ctx.saved_tensors
        if grad_h is None:
            raise RuntimeError("chunked_label_smoothed_loss was computed without gradients (under no_grad)")
        h_dtype, w_dtype = ctx.dtypes
        return (grad_h * grad_loss).to(h_dtype), (grad_w * grad_loss).to(w_dtype), None, None, None, None, None


def chunked_label_smoothed_loss(
    hidden: torch.Tensor,
    weight: torch.Tensor,
    target: torch.Tensor,
    *,
    epsilon: float,
    chunk_rows: int | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Summed label-smoothed loss and summed NLL of `target` under softmax(hidden @ weight^T), in float32.

    hidden (N, D) decoder states of the positions to score (pad positions already removed), weight (V, D) the
    output projection, target (N,) ids. Equals `label_smoothed_loss(hidden @ weight.T, target)` in value
    and gradient (tested); under autocast the logits are computed in the autocast dtype, as the model's output
    layer would. The NLL carries no gradient. chunk_rows: rows per chunk (default: 2^26 / V).
    """
    N, V = hidden.size(0), weight.size(0)
    chunk = chunk_rows or max(1, CHUNK_ELEMENTS // V)
    compute_dtype = _compute_dtype(hidden.device, hidden.dtype)
    with_grad = torch.is_grad_enabled() and (hidden.requires_grad or weight.requires_grad)
    if N == 0:
        zero = (hidden.sum() + weight.sum()) * 0.0  # keeps the graph (and DDP's hooks) when a batch has no targets
        return zero.float(), zero.detach().float()
    return _ChunkedLoss.apply(hidden, weight, target, float(epsilon), chunk, compute_dtype, with_grad)
