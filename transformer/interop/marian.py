"""Our model's shape as Hugging Face Marian's configuration fields: one mapping, read by the export
(`interop.export`) and by the training benchmark's Marian peer (`benchmarks.training`)."""

from __future__ import annotations

from transformer.data.tokenizer import BOS_ID, EOS_ID, PAD_ID

HF_ACTIVATIONS = {"relu": "relu", "gelu": "gelu", "silu": "swish"}  # ours -> HF's activation_function


def marian_fields(model_config, vocab_size: int, *, training: bool = False, bos_id: int = BOS_ID) -> dict:
    """MarianConfig / PegasusConfig keyword arguments for a model of `model_config`'s shape with one shared
    vocabulary of `vocab_size`: widths, depths, heads, activation, positions, embedding scale and special ids; the
    dropouts are the model's own when `training` (a peer trained beside ours), else 0 (an export, for inference)."""
    c = model_config
    dropout = lambda rate: rate if training else 0.0  # noqa: E731
    return dict(
        vocab_size=vocab_size,
        d_model=c.d_model,
        encoder_layers=c.n_encoder_layers,
        decoder_layers=c.n_decoder_layers,
        encoder_attention_heads=c.n_heads,
        decoder_attention_heads=c.n_heads,
        encoder_ffn_dim=c.d_ff,
        decoder_ffn_dim=c.d_ff,
        activation_function=HF_ACTIVATIONS[c.activation],
        dropout=dropout(c.dropout),
        attention_dropout=dropout(c.attention_dropout),
        activation_dropout=dropout(c.activation_dropout),
        max_position_embeddings=c.max_positions,
        scale_embedding=c.scale_embedding,
        pad_token_id=PAD_ID,
        bos_token_id=bos_id,
        eos_token_id=EOS_ID,
        decoder_start_token_id=bos_id,
        forced_eos_token_id=None,
        tie_word_embeddings=c.tie_output,
    )
