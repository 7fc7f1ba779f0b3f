"""The encoder-decoder Transformer (paper section 3, Figure 1) and its decoding interface.

Legend: B batch, S source length, T target length, D d_model, V vocabulary, K beam, N = B*K rows.

    memory = model.encode(src, src_mask)             # (B, S, D)
    logits = model.decode(tgt_in, memory, src_mask)  # (B, T, V) teacher forcing
    cache  = init_cache(model, memory, src_mask, beams=K, capacity=T_max)  # model/cache.py: cross K/V once
    log_probs = model.decode_step(tokens, cache)     # (N, 1) -> (N, V), appends self-attention K/V
    cache.rerank_beams(rows)                         # beams re-ranked within their sentences
    cache.keep_sentences(sentences, rows)            # finished sentences dropped (and the rest re-ranked)

The model knows nothing of search, data or training, nor of how the cache keeps its keys and values
(model/cache.py, or model/static_cache.py for a step captured as a CUDA graph): it reads the cache through
`position` (an int, or a () tensor on the device), `layers`, `memory_bias` and `self_attention_bias()`.
"""

from __future__ import annotations

import torch
from torch import nn

from transformer.config import ModelConfig
from transformer.model.attention import AttentionWeights, make_pad_mask
from transformer.model.embeddings import LearnedPositionalEmbedding, SinusoidalPositionalEncoding, TokenEmbedding
from transformer.model.layers import DecoderLayer, EncoderLayer


def _positional(kind: str, d_model: int, max_positions: int) -> nn.Module:
    cls = SinusoidalPositionalEncoding if kind == "sinusoidal" else LearnedPositionalEmbedding
    return cls(d_model=d_model, max_positions=max_positions)


class _Stack(nn.Module):
    """What both stacks share: embedding + positions with dropout, N layers, and pre-LN's final LayerNorm."""

    layer_class: type[nn.Module]

    def __init__(
        self,
        *,
        embedding: TokenEmbedding,
        positional: nn.Module,
        n_layers: int,
        dropout: float,
        norm_first: bool,
        eps: float,
        **layer_kwargs,
    ) -> None:
        super().__init__()
        self.embedding = embedding
        self.positional = positional
        self.dropout = nn.Dropout(dropout)
        kwargs = dict(dropout=dropout, norm_first=norm_first, eps=eps, **layer_kwargs)
        self.layers = nn.ModuleList(self.layer_class(**kwargs) for _ in range(n_layers))
        self.final_norm = nn.LayerNorm(embedding.weight.size(1), eps=eps) if norm_first else nn.Identity()

    def embed(self, tokens: torch.Tensor, offset: int | torch.Tensor = 0) -> torch.Tensor:
        """(B, T) ids -> (B, T, D): Dropout(Embedding(tokens) * sqrt(d_model) + PE[offset : offset + T])."""
        return self.dropout(self.positional(self.embedding(tokens), offset=offset))


class Encoder(_Stack):
    """Embedding + positions (with dropout), then N encoder layers; pre-LN adds a final LayerNorm."""

    layer_class = EncoderLayer

    def forward(
        self, src: torch.Tensor, src_mask: torch.Tensor, attention: AttentionWeights | None = None
    ) -> torch.Tensor:
        """src (B, S) ids, src_mask (B, 1, 1, S) -> memory (B, S, D); `attention` receives each layer's weights."""
        x = self.embed(src)  # (B, S, D)
        for layer in self.layers:
            x = layer(x, src_mask, attention)
        return self.final_norm(x)


class Decoder(_Stack):
    """Embedding + positions (with dropout), then N decoder layers; returns hidden states, not logits."""

    layer_class = DecoderLayer

    def forward(
        self,
        tgt_in: torch.Tensor,
        memory: torch.Tensor,
        src_mask: torch.Tensor,
        attention: AttentionWeights | None = None,
    ) -> torch.Tensor:
        """tgt_in (B, T) ids starting with BOS, memory (B, S, D) -> (B, T, D); `attention` receives the weights."""
        x = self.embed(tgt_in)  # (B, T, D)
        for layer in self.layers:
            x = layer(x, memory, src_mask, attention)
        return self.final_norm(x)

    def step(self, tokens: torch.Tensor, cache) -> torch.Tensor:
        """tokens (N, 1), the newest target token per row -> (N, 1, D); appends to every layer's cache."""
        x = self.embed(tokens, offset=cache.position)  # (N, 1, D)
        self_bias = cache.self_attention_bias()  # (B, H, K, (t+1)*slots) or None, the same for every layer
        for layer, layer_cache in zip(self.layers, cache.layers):
            x = layer.step(x, layer_cache, cache.memory_bias, self_bias)
        cache.position += 1
        return self.final_norm(x)


class Transformer(nn.Module):
    """Encoder-decoder with (optionally) one embedding matrix shared by source, target and the output layer."""

    def __init__(
        self,
        *,
        src_vocab_size: int,
        tgt_vocab_size: int,
        pad_id: int,
        d_model: int,
        n_heads: int,
        d_ff: int,
        n_encoder_layers: int,
        n_decoder_layers: int,
        dropout: float,
        attention_dropout: float,
        activation_dropout: float,
        activation: str,
        norm_first: bool,
        layer_norm_eps: float,
        positional: str,
        max_positions: int,
        share_embeddings: bool,
        tie_output: bool,
        scale_embedding: bool,
        output_bias: bool,
    ) -> None:
        """Every setting is required here: ModelConfig (config/sections.py) holds the defaults; see `from_config`."""
        super().__init__()
        if share_embeddings and src_vocab_size != tgt_vocab_size:
            raise ValueError(f"share_embeddings needs one vocabulary, got {src_vocab_size} and {tgt_vocab_size}")
        self.pad_id = pad_id
        self.max_positions = max_positions
        embedding = dict(d_model=d_model, pad_id=pad_id, scale=scale_embedding)
        src_embedding = TokenEmbedding(vocab_size=src_vocab_size, **embedding)
        tgt_embedding = src_embedding if share_embeddings else TokenEmbedding(vocab_size=tgt_vocab_size, **embedding)
        stack = dict(
            dropout=dropout,
            norm_first=norm_first,
            eps=layer_norm_eps,
            d_model=d_model,
            n_heads=n_heads,
            d_ff=d_ff,
            attention_dropout=attention_dropout,
            activation_dropout=activation_dropout,
            activation=activation,
        )
        self.encoder = Encoder(
            embedding=src_embedding,
            positional=_positional(positional, d_model, max_positions),
            n_layers=n_encoder_layers,
            **stack,
        )
        self.decoder = Decoder(
            embedding=tgt_embedding,
            positional=_positional(positional, d_model, max_positions),
            n_layers=n_decoder_layers,
            **stack,
        )
        self.output_proj = nn.Linear(d_model, tgt_vocab_size, bias=output_bias)  # bias: imported models only
        self._init_projections()
        if tie_output:
            self.output_proj.weight = tgt_embedding.weight  # softmax(h E^T): the pre-softmax layer is E

    @classmethod
    def from_config(cls, config: ModelConfig, *, src_vocab_size: int, tgt_vocab_size: int, pad_id: int):
        """The only place a config object meets the model."""
        fields = {name: getattr(config, name) for name in config.__dataclass_fields__}
        return cls(src_vocab_size=src_vocab_size, tgt_vocab_size=tgt_vocab_size, pad_id=pad_id, **fields)

    def _init_projections(self) -> None:
        """Xavier uniform for every projection (each Q, K, V block of a fused matrix on its own), zero biases."""
        for name, module in self.named_modules():
            if isinstance(module, nn.Linear):
                if name.endswith(("qkv_proj", "kv_proj")):
                    for block in module.weight.data.chunk(module.out_features // module.in_features, dim=0):
                        nn.init.xavier_uniform_(block)
                else:
                    nn.init.xavier_uniform_(module.weight)
                if module.bias is not None:
                    nn.init.zeros_(module.bias)

    # -------------------------------------------------------------------------------- training interface

    def encode(self, src: torch.Tensor, src_mask: torch.Tensor) -> torch.Tensor:
        """src (B, S) ids, src_mask (B, 1, 1, S) bool -> memory (B, S, D)."""
        return self.encoder(src, src_mask)

    def decode(self, tgt_in: torch.Tensor, memory: torch.Tensor, src_mask: torch.Tensor) -> torch.Tensor:
        """Teacher forcing: tgt_in (B, T) ids, memory (B, S, D) -> logits (B, T, V) in the compute dtype."""
        return self.output_proj(self.decoder(tgt_in, memory, src_mask))

    def forward(
        self,
        src: torch.Tensor,
        tgt_in: torch.Tensor,
        *,
        positions: torch.Tensor | None = None,
        project: bool = True,
        return_attention: bool = False,
    ) -> torch.Tensor | tuple[torch.Tensor, AttentionWeights]:
        """src (B, S), tgt_in (B, T) -> logits (B, T, V); padding is read from `pad_id`.

        positions (N,) long, flat indices into the B*T target positions: only those, as rows (N, V) (training
        scores the real targets only, not the padding; an index, not a mask, so no device sync). project=False:
        the decoder states (B, T, D) or (N, D) instead of logits, for a loss that applies the output layer itself
        (`transformer.training.loss`). return_attention=True: (output, `AttentionWeights`), every layer's
        attention probabilities computed explicitly instead of by SDPA (alignments, attention maps); the rows of
        padded queries are not meaningful.
        """
        attention = AttentionWeights([], [], []) if return_attention else None
        src_mask = make_pad_mask(src, self.pad_id)  # (B, 1, 1, S)
        hidden = self.decoder(tgt_in, self.encoder(src, src_mask, attention), src_mask, attention)  # (B, T, D)
        if positions is not None:
            hidden = hidden.flatten(0, 1).index_select(0, positions)  # (N, D)
        output = self.output_proj(hidden) if project else hidden
        return output if attention is None else (output, attention)

    # ------------------------------------------------------------------------------- decoding interface

    def decode_step(self, tokens: torch.Tensor, cache) -> torch.Tensor:
        """tokens (N, 1), the last token of each row -> log-probabilities (N, V) in float32; grows the cache (a
        `DecoderCache` from model/cache.py's `init_cache`)."""
        hidden = self.decoder.step(tokens, cache)  # (N, 1, D)
        logits = self.output_proj(hidden[:, -1]).float()  # (N, V)
        return torch.log_softmax(logits, dim=-1, out=logits)  # in place: one (N, V) buffer fewer to write and read


def count_parameters(model: nn.Module) -> int:
    """Number of distinct trainable parameters (a tied matrix counts once)."""
    return sum(p.numel() for p in model.parameters() if p.requires_grad)
