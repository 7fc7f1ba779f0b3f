"""The model against independent references: torch.nn.Transformer on copied weights, causality, padding,
gradients, incremental decoding against the full forward pass."""

from __future__ import annotations

import pytest
import torch
from conftest import PAD, TINY, random_tokens, tiny_model
from torch import nn

from transformer.config import ModelConfig
from transformer.model.attention import make_causal_mask, make_pad_mask
from transformer.model.cache import LayerCache, init_cache
from transformer.model.transformer import Transformer, count_parameters


def _copy_attention(ours, theirs: nn.MultiheadAttention) -> None:
    if ours.self_attention:
        ours.qkv_proj.weight.copy_(theirs.in_proj_weight)
        ours.qkv_proj.bias.copy_(theirs.in_proj_bias)
    else:
        D = ours.out_proj.in_features
        ours.q_proj.weight.copy_(theirs.in_proj_weight[:D])
        ours.q_proj.bias.copy_(theirs.in_proj_bias[:D])
        ours.kv_proj.weight.copy_(theirs.in_proj_weight[D:])
        ours.kv_proj.bias.copy_(theirs.in_proj_bias[D:])
    ours.out_proj.load_state_dict(theirs.out_proj.state_dict())


def _copy_layer(ours, theirs) -> None:
    _copy_attention(ours.self_attn, theirs.self_attn)
    ours.ff.linear1.load_state_dict(theirs.linear1.state_dict())
    ours.ff.linear2.load_state_dict(theirs.linear2.state_dict())
    ours.self_attn_norm.load_state_dict(theirs.norm1.state_dict())
    if hasattr(theirs, "multihead_attn"):
        _copy_attention(ours.cross_attn, theirs.multihead_attn)
        ours.cross_attn_norm.load_state_dict(theirs.norm2.state_dict())
        ours.ff_norm.load_state_dict(theirs.norm3.state_dict())
    else:
        ours.ff_norm.load_state_dict(theirs.norm2.state_dict())


@pytest.mark.parametrize("norm_first", [False, True])
def test_parity_with_torch_nn_transformer(norm_first):
    """Our encoder and decoder equal torch.nn.Transformer's with the same weights (fp32, dropout 0)."""
    ours = tiny_model(norm_first=norm_first, n_encoder_layers=2, n_decoder_layers=2)
    D = TINY["d_model"]
    kwargs = dict(d_model=D, nhead=2, dim_feedforward=24, dropout=0.0, batch_first=True, norm_first=norm_first)
    final = (lambda: nn.LayerNorm(D)) if norm_first else (lambda: None)
    theirs = nn.Transformer(
        custom_encoder=nn.TransformerEncoder(
            nn.TransformerEncoderLayer(**kwargs), 2, norm=final(), enable_nested_tensor=False
        ),
        custom_decoder=nn.TransformerDecoder(nn.TransformerDecoderLayer(**kwargs), 2, norm=final()),
        batch_first=True,
    ).eval()
    with torch.no_grad():
        for p in theirs.parameters():
            p.normal_(0, 0.3)
        for a, b in zip(ours.encoder.layers, theirs.encoder.layers):
            _copy_layer(a, b)
        for a, b in zip(ours.decoder.layers, theirs.decoder.layers):
            _copy_layer(a, b)
        if norm_first:
            ours.encoder.final_norm.load_state_dict(theirs.encoder.norm.state_dict())
            ours.decoder.final_norm.load_state_dict(theirs.decoder.norm.state_dict())

    src = random_tokens(3, 7)
    src[1, 5:] = PAD
    src[2, 3:] = PAD
    tgt = random_tokens(3, 5, seed=1)
    src_mask = make_pad_mask(src, PAD)
    with torch.no_grad():
        src_x = ours.encoder.embed(src)
        tgt_x = ours.decoder.embed(tgt)
        memory = ours.encode(src, src_mask)
        expected_memory = theirs.encoder(src_x, src_key_padding_mask=src == PAD)
        hidden = ours.decoder(tgt, memory, src_mask)
        expected_hidden = theirs.decoder(
            tgt_x,
            memory,
            tgt_mask=nn.Transformer.generate_square_subsequent_mask(5),
            tgt_is_causal=True,
            memory_key_padding_mask=src == PAD,
        )
    real = src != PAD
    torch.testing.assert_close(memory[real], expected_memory[real], atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(hidden, expected_hidden, atol=1e-5, rtol=1e-5)


def test_masks():
    assert make_causal_mask(4).tolist() == [
        [True, False, False, False],
        [True, True, False, False],
        [True, True, True, False],
        [True, True, True, True],
    ]
    assert make_pad_mask(torch.tensor([[5, 6, 0]]), 0).shape == (1, 1, 1, 3)
    assert make_pad_mask(torch.tensor([[5, 6, 0]]), 0).flatten().tolist() == [True, True, False]


def test_causality(model):
    """Changing future target tokens leaves earlier logits unchanged, and does change later ones."""
    src, tgt = random_tokens(2, 6), random_tokens(2, 5, seed=1)
    changed = tgt.clone()
    changed[:, 3:] = (changed[:, 3:] + 1 - 4) % 19 + 4
    with torch.no_grad():
        a, b = model(src, tgt), model(src, changed)
    torch.testing.assert_close(a[:, :3], b[:, :3], atol=1e-6, rtol=0)
    assert not torch.allclose(a[:, 3:], b[:, 3:])


def test_padding_invariance(model):
    """Extra source padding changes no logit; extra target padding changes no earlier logit."""
    src, tgt = random_tokens(2, 6), random_tokens(2, 5, seed=1)
    padded_src = torch.cat([src, torch.full((2, 4), PAD)], dim=1)
    padded_tgt = torch.cat([tgt, torch.full((2, 3), PAD)], dim=1)
    with torch.no_grad():
        expected = model(src, tgt)
        torch.testing.assert_close(model(padded_src, tgt), expected, atol=1e-5, rtol=1e-5)
        torch.testing.assert_close(model(src, padded_tgt)[:, :5], expected, atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("share", [True, False])
def test_gradients_reach_every_parameter(share):
    model = tiny_model(dropout=0.1, share_embeddings=share, tie_output=share).train()
    model(random_tokens(2, 6), random_tokens(2, 5, seed=1)).sum().backward()
    for name, p in model.named_parameters():
        assert p.grad is not None and p.grad.abs().sum() > 0, name


@pytest.mark.parametrize("norm_first", [False, True])
@pytest.mark.parametrize("positional", ["sinusoidal", "learned"])
def test_decode_step_equals_full_decode(norm_first, positional):
    model = tiny_model(norm_first=norm_first, positional=positional)
    src = random_tokens(3, 7)
    src[1, 4:] = PAD
    tgt = random_tokens(3, 6, seed=1)
    src_mask = make_pad_mask(src, PAD)
    with torch.no_grad():
        memory = model.encode(src, src_mask)
        full = model.decode(tgt, memory, src_mask).log_softmax(-1)  # (B, T, V)
        cache = init_cache(model, memory, src_mask, beams=1, capacity=4)  # grows past 4 positions
        steps = torch.stack([model.decode_step(tgt[:, t : t + 1], cache) for t in range(6)], dim=1)
    torch.testing.assert_close(steps, full, atol=1e-5, rtol=1e-5)
    assert cache.layers[0].keys.shape == (3, 2, 6, 8)  # (B, H, t * slots, Dh), one slot


def test_cache_keep_sentences_equals_permuted_inputs(model):
    """Sentences dropped, repeated and reordered (one row each) mid-decoding equal the full forward on them."""
    src, tgt = random_tokens(3, 7), random_tokens(3, 4, seed=1)
    order = torch.tensor([2, 0, 0, 1])
    with torch.no_grad():
        src_mask = make_pad_mask(src, PAD)
        cache = init_cache(model, model.encode(src, src_mask), src_mask, beams=1, capacity=8)
        for t in range(3):
            model.decode_step(tgt[:, t : t + 1], cache)
        buffer = cache.layers[0].buffer
        cache.keep_sentences(order)
        assert cache.layers[0].buffer is not buffer  # a repeated sentence: every kept one copied to a new buffer
        reordered = model.decode_step(tgt[order, 3:4], cache)
        expected = model.decode(tgt[order], model.encode(src[order], src_mask[order]), src_mask[order])
    torch.testing.assert_close(reordered, expected[:, 3].log_softmax(-1), atol=1e-5, rtol=1e-5)


def test_cache_rerank_beams_leaves_cross_attention_alone(model):
    """Two beams per sentence, one copy of its memory's K/V: re-ranking the beams equals the full forward."""
    src, tgt = random_tokens(2, 7), random_tokens(4, 4, seed=1)  # 2 sentences x 2 beams
    src[1, 5:] = PAD
    expand, within = torch.tensor([0, 0, 1, 1]), torch.tensor([1, 1, 3, 2])
    with torch.no_grad():
        src_mask = make_pad_mask(src, PAD)
        cache = init_cache(model, model.encode(src, src_mask), src_mask, beams=2, capacity=8)
        cross_k = cache.layers[0].cross_k
        assert cross_k.size(0) == 2  # one per sentence
        for t in range(3):
            model.decode_step(tgt[:, t : t + 1], cache)
        cache.rerank_beams(within)
        assert cache.layers[0].cross_k is cross_k
        stepped = model.decode_step(tgt[within, 3:4], cache)
        expected = model.decode(tgt[within], model.encode(src[expand], src_mask[expand]), src_mask[expand])
    torch.testing.assert_close(stepped, expected[:, 3].log_softmax(-1), atol=1e-5, rtol=1e-5)


def test_cache_keep_sentences_with_reranked_rows(model):
    """3 sentences x 2 beams; sentence 1 leaves while the others' beams are re-ranked in the same step."""
    src, tgt = random_tokens(3, 6), random_tokens(6, 5, seed=2)
    src[0, 4:] = PAD
    sentences, rows = torch.tensor([0, 2]), torch.tensor([1, 1, 5, 4])
    with torch.no_grad():
        src_mask = make_pad_mask(src, PAD)
        cache = init_cache(model, model.encode(src, src_mask), src_mask, beams=2, capacity=2)
        for t in range(4):
            model.decode_step(tgt[:, t : t + 1], cache)
        buffer = cache.layers[0].buffer
        cache.keep_sentences(sentences, rows)
        assert cache.layers[0].buffer is buffer  # sentence 2 moved into the place of sentence 1, in place
        stepped = model.decode_step(tgt[rows, 4:5], cache)
        kept = sentences.repeat_interleave(2)
        expected = model.decode(tgt[rows], model.encode(src[kept], src_mask[kept]), src_mask[kept])
    torch.testing.assert_close(stepped, expected[:, 4].log_softmax(-1), atol=1e-5, rtol=1e-5)
    assert cache.layers[0].keys.shape == (2, 2, 5 * 2, 8) and cache.src_mask.size(0) == 2  # 2 slots each


def test_tied_embeddings_are_one_matrix(model):
    assert model.encoder.embedding.weight is model.decoder.embedding.weight is model.output_proj.weight
    untied = tiny_model(share_embeddings=False, tie_output=False)
    assert untied.encoder.embedding.weight is not untied.decoder.embedding.weight
    assert count_parameters(untied) - count_parameters(model) == 2 * 23 * 16


def test_initialisation_scales():
    model = tiny_model(src_vocab_size=1000, tgt_vocab_size=1000, d_model=64, n_heads=4, d_ff=128)
    emb = model.encoder.embedding.weight[1:]
    assert abs(emb.std().item() - 64**-0.5) < 0.01
    assert model.encoder.embedding.weight[0].abs().sum() == 0  # the pad row
    qkv = model.encoder.layers[0].self_attn.qkv_proj.weight
    bound = (6 / (64 + 64)) ** 0.5  # each Q, K, V block initialised as its own 64x64 matrix
    assert qkv.abs().max() <= bound and qkv.abs().max() > 0.9 * bound
    assert model.encoder.layers[0].ff.linear1.bias.abs().sum() == 0


def test_base_parameter_count():
    """The paper reports 65M for base; with a 37k shared vocabulary the count is 63.1M."""
    model = Transformer.from_config(ModelConfig(), src_vocab_size=37000, tgt_vocab_size=37000, pad_id=0)
    assert round(count_parameters(model) / 1e6, 1) == 63.1


def test_cache_slots_grow_with_the_beams_and_unowned_slots_are_zero():
    """One slot per sentence until re-ranking makes 3 rows of one: the old positions keep their key in slot 0 and
    get zeros in the new slots (hidden by the bias, multiplied by a weight of exactly 0); a step that writes fewer
    rows than there are slots zeroes the rest."""
    layer = LayerCache(torch.randn(2, 2, 5, 4), torch.randn(2, 2, 5, 4), slots=1, capacity=2)  # (B, H, S, Dh)
    k = torch.randn(2, 2, 1, 4)  # (B, H, K', Dh)
    layer.append(torch.stack([k, k]))  # keys and values (2, B, H, K', Dh)
    layer.resize(positions=2, slots=3)
    keys, _ = layer.append(torch.randn(2, 2, 2, 2, 4))  # 2 rows into 3 slots
    assert keys.shape == (2, 2, 2 * 3, 4)
    assert torch.equal(keys[:, :, 0:1], k) and not keys[:, :, 1:3].any() and not keys[:, :, 5].any()
    assert layer.buffer.size(3) == 2  # no position was added: capacity 2
    layer.append(torch.stack([k, k]))
    assert layer.buffer.size(3) == 4 and torch.equal(layer.keys[:, :, :1], k)  # doubled, the prefix kept


@pytest.mark.parametrize("norm_first", [False, True])
def test_return_attention_keeps_the_logits_and_gives_every_layers_weights(norm_first):
    """return_attention=True: the same logits (the explicit path computes what SDPA does), and per layer one
    (B, H, queries, keys) tensor of probabilities: no weight on source padding, none on later target positions."""
    model = tiny_model(norm_first=norm_first)  # 2 encoder layers, 3 decoder layers, 2 heads
    src, tgt = random_tokens(2, 7), random_tokens(2, 5, seed=1)
    src[1, 4:] = PAD
    with torch.no_grad():
        logits, attention = model(src, tgt, return_attention=True)
        torch.testing.assert_close(logits, model(src, tgt), atol=1e-5, rtol=1e-5)
    shapes = {"encoder": (2, (2, 2, 7, 7)), "decoder": (3, (2, 2, 5, 5)), "cross": (3, (2, 2, 5, 7))}
    for kind, (layers, shape) in shapes.items():
        weights = getattr(attention, kind)
        assert len(weights) == layers and all(w.shape == shape for w in weights), kind
        for w in weights:
            torch.testing.assert_close(w.sum(-1), torch.ones(shape[:3]))
    for w in attention.encoder + attention.cross:
        assert torch.all(w[1, :, :, 4:] == 0)  # sentence 1's padded source positions
    for w in attention.decoder:
        assert torch.all(w.triu(diagonal=1) == 0)  # causal
    assert not any(isinstance(v, torch.Tensor) and v.dim() == 4 for m in model.modules() for v in vars(m).values())
