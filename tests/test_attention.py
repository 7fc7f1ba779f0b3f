"""Attention against vectors worked by hand from the paper's formula softmax(QK^T / sqrt(d_k)) V (section 3.2.1),
and against an explicit reference."""

from __future__ import annotations

import math

import pytest
import torch

from transformer.devices import avoid_cudnn_attention
from transformer.model.attention import (
    MultiHeadAttention,
    attention_bias,
    make_causal_mask,
    make_pad_mask,
    reference_attention,
    step_attention,
)

T = lambda rows: torch.tensor(rows, dtype=torch.float64)  # noqa: E731


def both_paths(q, k, v, mask=None):
    """Our `MultiHeadAttention.attend` (one head, W^O the identity, so its output is the attention itself) and the
    explicit formula: (T, d_k) x (S, d_k) x (S, d_v) -> (T, d_v) each."""
    mha = MultiHeadAttention(d_model=v.size(-1), n_heads=1, attention_dropout=0.0, self_attention=True).double()
    with torch.no_grad():
        mha.out_proj.weight.copy_(torch.eye(v.size(-1))), mha.out_proj.bias.zero_()
    q, k, v = q[None, None], k[None, None], v[None, None]  # (1, 1, T, d_k): one sentence, one head
    return mha.attend(q, k, v, mask)[0], reference_attention(q, k, v, mask)[0, 0]  # (1, T, d_v) -> (T, d_v)


def test_example_a_forward_and_backward():
    """Row 1: scores (1, 2)/sqrt(3), softmax (0.3595, 0.6405); row 2: equal scores, (0.5, 0.5). Outputs are those
    weights times V; gradients by the chain rule through the softmax, each worked by hand."""
    q = T([[1, 0, 1], [0, 1, 1]]).requires_grad_()
    k = T([[1, 1, 0], [1, 0, 1]]).requires_grad_()
    v = T([[2, 0, 1], [1, 1, 0]]).requires_grad_()
    weights = (q @ k.T / math.sqrt(3)).softmax(-1)
    torch.testing.assert_close(weights, T([[0.3595, 0.6405], [0.5, 0.5]]), atol=1e-4, rtol=0)
    for out in both_paths(q, k, v):
        torch.testing.assert_close(out, T([[1.3595, 0.6405, 0.3595], [1.5, 0.5, 0.5]]), atol=1e-4, rtol=0)
        dq, dk, dv = torch.autograd.grad(out, (q, k, v), grad_outputs=T([[1, 0, 1], [0, 1, 0]]))
        torch.testing.assert_close(dv, T([[0.3595, 0.5, 0.3595], [0.6405, 0.5, 0.6405]]), atol=1e-4, rtol=0)
        torch.testing.assert_close(dq, T([[0, 0.2659, -0.2659], [0, -0.1443, 0.1443]]), atol=1e-4, rtol=0)
        torch.testing.assert_close(dk, T([[0.2659, -0.1443, 0.1216], [-0.2659, 0.1443, -0.1216]]), atol=1e-4, rtol=0)


def test_example_b_single_query():
    """Scores (1, 1, 2)/sqrt(3): softmax (0.2645, 0.2645, 0.4711); output = 0.2645*(1+3) + 0.4711*5, and so on."""
    q, k, v = T([[1, 0, 1]]), T([[1, 1, 0], [0, 1, 1], [1, 0, 1]]), T([[1, 2], [3, 4], [5, 6]])
    torch.testing.assert_close((q @ k.T / math.sqrt(3)).softmax(-1), T([[0.2645, 0.2645, 0.4711]]), atol=1e-4, rtol=0)
    for out in both_paths(q, k, v):
        torch.testing.assert_close(out, T([[3.4132, 4.4132]]), atol=1e-4, rtol=0)


def test_example_c_projections():
    """Q = X W_q, K = X W_k, V = X W_v by hand (integer products), then the formula with d_k = 2."""
    x = T([[1, 0, 1, 0], [0, 1, 0, 1], [1, 1, 0, 0]])
    wq, wk = T([[1, 0], [0, 1], [1, 0], [0, 1]]), T([[0, 1], [1, 0], [0, 1], [1, 0]])
    wv = T([[1, 1], [0, 0], [0, 1], [1, 0]])
    q, k, v = x @ wq, x @ wk, x @ wv
    assert (q @ k.T).tolist() == [[0, 4, 2], [4, 0, 2], [2, 2, 2]]
    expected = T([[1, 0.2775], [1, 1.7225], [1, 1]])
    for out in both_paths(q, k, v):
        torch.testing.assert_close(out, expected, atol=1e-4, rtol=0)


def test_example_i_causal_mask_as_additive():
    """Section 3.2.3: position i may attend to positions <= i; the additive form sets the rest to -inf."""
    additive = torch.zeros(4, 4).masked_fill(~make_causal_mask(4), float("-inf"))
    inf = float("-inf")
    expected = [[0, inf, inf, inf], [0, 0, inf, inf], [0, 0, 0, inf], [0, 0, 0, 0]]
    assert additive.tolist() == expected


@pytest.mark.parametrize("self_attention", [True, False])
def test_multi_head_attention_equals_per_head_reference(self_attention):
    """Our module (fused projections, SDPA, padding mask) equals heads computed one by one and concatenated."""
    torch.manual_seed(0)
    D, H, B, Tq, S = 12, 3, 2, 5, 7
    mha = MultiHeadAttention(d_model=D, n_heads=H, attention_dropout=0.0, self_attention=self_attention).double().eval()
    for p in mha.parameters():
        torch.nn.init.normal_(p, std=0.3)
    x = torch.randn(B, Tq, D, dtype=torch.float64)
    memory = torch.randn(B, S, D, dtype=torch.float64)
    keys = x if self_attention else memory
    tokens = torch.ones(B, keys.size(1), dtype=torch.long)
    tokens[1, -2:] = 0
    mask = make_pad_mask(tokens, 0)  # (B, 1, 1, S)
    out = mha(x, None if self_attention else memory, mask=mask)

    if self_attention:
        wq, wk, wv = mha.qkv_proj.weight.chunk(3)
        bq, bk, bv = mha.qkv_proj.bias.chunk(3)
    else:
        (wq, bq), (wk, wv), (bk, bv) = (
            (mha.q_proj.weight, mha.q_proj.bias),
            mha.kv_proj.weight.chunk(2),
            mha.kv_proj.bias.chunk(2),
        )
    heads = []
    for h in range(H):
        rows = slice(h * D // H, (h + 1) * D // H)
        q = x @ wq[rows].T + bq[rows]
        k = keys @ wk[rows].T + bk[rows]
        v = keys @ wv[rows].T + bv[rows]
        heads.append(reference_attention(q, k, v, mask[:, 0]))  # (B, T, Dh)
    expected = mha.out_proj(torch.cat(heads, dim=-1))
    torch.testing.assert_close(out, expected, atol=1e-10, rtol=1e-10)


def test_padding_keys_get_no_weight():
    q, k, v = (torch.randn(n, 4, dtype=torch.float64) for n in (3, 5, 5))
    mask = make_pad_mask(torch.tensor([[7, 7, 7, 0, 0]]), 0)  # (1, 1, 1, S): the last two keys are padding
    changed = v.clone()
    changed[3:] = 100.0
    torch.testing.assert_close(*both_paths(q, k, v, mask))
    torch.testing.assert_close(both_paths(q, k, changed, mask)[0], both_paths(q, k, v, mask)[0])


def test_avoid_cudnn_attention_turns_the_cudnn_backend_off():
    """CUDA runs call it so that SDPA never builds a cuDNN plan per shape; the switch itself works without a GPU."""
    if not hasattr(torch.backends.cuda, "cudnn_sdp_enabled"):
        pytest.skip("this torch has no cuDNN attention backend")
    was = torch.backends.cuda.cudnn_sdp_enabled()
    try:
        torch.backends.cuda.enable_cudnn_sdp(True)
        avoid_cudnn_attention()
        assert not torch.backends.cuda.cudnn_sdp_enabled()
    finally:
        torch.backends.cuda.enable_cudnn_sdp(was)


def test_attention_bias_is_zero_or_minus_infinity():
    bias = attention_bias(torch.tensor([[True, False, True]]), torch.float32)
    assert bias.tolist() == [[0.0, float("-inf"), 0.0]] and bias.dtype == torch.float32


@pytest.mark.parametrize("per_query", [False, True])
def test_step_attention_with_a_bias_equals_the_masked_formula(per_query):
    """Decoding's attention (baddbmm with the bias, on strided cache views) against softmax(QK^T/sqrt(d_k)) V with
    the mask; a hidden key's value may be anything finite."""
    B, H, Q, t, Dh = 2, 3, 4, 6, 8
    q = torch.randn(B, H, Q, Dh, dtype=torch.float64)
    cache = torch.randn(2, B, H, t + 3, Dh, dtype=torch.float64)  # room for more positions: strided views
    k, v = cache[0, :, :, :t], cache[1, :, :, :t]
    mask = torch.rand(B, 1, Q if per_query else 1, t) > 0.4
    mask[..., 0], mask[..., 1] = True, False  # every query sees key 0; none sees key 1
    expected = reference_attention(q, k, v, mask)
    bias = attention_bias(mask, torch.float64)
    torch.testing.assert_close(step_attention(q, k, v, bias), expected)
    v[:, :, 1] = 1e30
    torch.testing.assert_close(step_attention(q, k, v, bias), expected)
    torch.testing.assert_close(step_attention(q, k, v), reference_attention(q, k, v))


@pytest.mark.parametrize("case", ["self", "self causal", "cross"])
def test_the_explicit_weights_path_equals_sdpa_and_the_formula(case):
    """A list passed as `weights` switches to the explicit path: the module's output stays SDPA's, and the list
    receives softmax(Q K^T / sqrt(d_k)) per head, computed here from the module's own projections with the mask
    (padding: keys 5-6 of sentence 1; causal: key j > query i) set to -inf before the softmax."""
    torch.manual_seed(0)
    D, H, B, Tq, S = 12, 3, 2, 7, 9
    self_attention, causal = case.startswith("self"), case.endswith("causal")
    mha = MultiHeadAttention(d_model=D, n_heads=H, attention_dropout=0.0, self_attention=self_attention).double()
    x, memory = torch.randn(B, Tq, D, dtype=torch.float64), torch.randn(B, S, D, dtype=torch.float64)
    keys = x if self_attention else memory
    tokens = torch.ones(B, keys.size(1), dtype=torch.long)
    tokens[1, 5:] = 0
    mask = None if causal else make_pad_mask(tokens, 0)  # (B, 1, 1, S)
    memory_arg = None if self_attention else memory
    weights: list[torch.Tensor] = []
    explicit = mha(x, memory_arg, mask=mask, is_causal=causal, weights=weights)
    torch.testing.assert_close(explicit, mha(x, memory_arg, mask=mask, is_causal=causal), atol=1e-12, rtol=1e-12)

    wq, wk = (
        (mha.qkv_proj.weight[:D], mha.qkv_proj.weight[D : 2 * D])
        if self_attention
        else (mha.q_proj.weight, mha.kv_proj.weight[:D])
    )
    bq, bk = (
        (mha.qkv_proj.bias[:D], mha.qkv_proj.bias[D : 2 * D])
        if self_attention
        else (mha.q_proj.bias, mha.kv_proj.bias[:D])
    )
    allowed = torch.ones(B, Tq, keys.size(1), dtype=torch.bool)
    allowed = allowed.tril() if causal else allowed & (tokens[:, None, :] != 0)
    expected = []
    for h in range(H):
        rows = slice(h * D // H, (h + 1) * D // H)
        q, k = x @ wq[rows].T + bq[rows], keys @ wk[rows].T + bk[rows]  # (B, T, Dh), (B, S, Dh)
        scores = (q @ k.transpose(1, 2) / math.sqrt(D // H)).masked_fill(~allowed, float("-inf"))
        expected.append(scores.softmax(dim=-1))  # (B, T, S)
    assert len(weights) == 1 and weights[0].shape == (B, H, Tq, keys.size(1))
    torch.testing.assert_close(weights[0], torch.stack(expected, dim=1), atol=1e-12, rtol=1e-12)
    assert torch.all(weights[0][~allowed[:, None].expand(-1, H, -1, -1)] == 0)


def test_the_explicit_path_returns_the_weights_before_dropout():
    """Training with attention dropout: the output is dropped out, the weights handed back are the probabilities
    (rows summing to 1, equal to the evaluation-mode weights)."""
    torch.manual_seed(0)
    mha = MultiHeadAttention(d_model=8, n_heads=2, attention_dropout=0.5, self_attention=True).double()
    x = torch.randn(2, 5, 8, dtype=torch.float64)
    train, evaluation = [], []
    out_train = mha.train()(x, weights=train)
    out_eval = mha.eval()(x, weights=evaluation)
    assert not torch.allclose(out_train, out_eval)
    torch.testing.assert_close(train[0], evaluation[0])
    torch.testing.assert_close(train[0].sum(-1), torch.ones(2, 2, 5, dtype=torch.float64))
