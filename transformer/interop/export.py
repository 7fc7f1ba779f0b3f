"""Export a checkpoint to Hugging Face `transformers` (Marian / Pegasus) or CTranslate2, with identical outputs.

Legend: D d_model, F d_ff, V vocabulary, P a permutation of the D model dimensions.

    transformer-export --checkpoint CKPT --format hf --output DIR            # MarianMTModel (post-LN) or
                                                                            # PegasusForConditionalGeneration (pre-LN)
    transformer-export --checkpoint CKPT --format ctranslate2 --output DIR  # a ctranslate2.Translator directory

Decisions:
- Hugging Face: post-LN models (the paper's) become `MarianMTModel`; pre-LN ones `PegasusForConditionalGeneration`,
  the same network with LayerNorm first and a final LayerNorm per stack (Marian has no pre-LN). Both compute their
  sinusoids themselves, with our frequencies but all sines first, then all cosines, where ours interleave them
  (sin, cos, sin, cos, ...). Permuting the model dimension by P = [0, 2, 4, ..., 1, 3, 5, ...] in every weight
  that reads or writes the residual stream (embeddings, every projection's input or output side, LayerNorm's
  gain and bias) is an exact symmetry: LayerNorm's mean and variance do not depend on the order of the dimensions,
  attention and the FFN see the same values. The hidden states come out permuted, the logits unchanged.
- Refused for Hugging Face, one line each: learned positions (Marian and Pegasus recompute fixed sinusoids on
  load), separate source and target embeddings, a LayerNorm epsilon other than 1e-5.
- CTranslate2: built through its model-spec API (the same fused Q/K/V and K/V layout as ours, pre-LN or post-LN,
  ReLU or GELU, our own position table written in, so learned positions work too), saved by its converter.
- Token ids are ours in both (pad 0, unk 1, bos 2 = decoder start, eos 3); PAD and BOS are never generated, as in
  our search. The SentencePiece model travels with the export (HF: MarianTokenizer files; CT2: `*.spm`).
- The checkpoint's decoding settings travel as far as each engine takes them (engine_settings.py): HF's in
  generation_config.json, with decoding/repeat_runs.py copied in for the run limit (`decode.max_ngram_repeats`,
  a logits processor the caller passes to `generate`); CTranslate2's as `translate_batch` arguments in
  decoding.json, which both folders hold, with the settings the engine will not apply; `transformer-export` names
  those in one line.
"""

from __future__ import annotations

import json
import logging
import shutil
import tempfile
from pathlib import Path

import torch

from transformer.data.tokenizer import BOS_ID, EOS_ID, PAD_ID, UNK_ID
from transformer.decoding import repeat_runs
from transformer.errors import UserError
from transformer.interop.engine_settings import engine_settings
from transformer.interop.marian import marian_fields
from transformer.model.embeddings import SinusoidalPositionalEncoding
from transformer.model.layers import DecoderLayer

log = logging.getLogger(__name__)

FORMATS = ("hf", "ctranslate2")
CT2_QUANTIZATIONS = ("int8", "int8_float32", "int8_float16", "int8_bfloat16", "int16", "float16", "bfloat16", "float32")
EXPORT_FILES = {  # what either format writes; a re-export may replace these
    "config.json",
    "generation_config.json",
    "model.safetensors",
    "tokenizer_config.json",
    "special_tokens_map.json",
    "vocab.json",
    "source.spm",
    "target.spm",
    "model.bin",
    "shared_vocabulary.json",
    "source_vocabulary.json",
    "target_vocabulary.json",
    "decoding.json",
    "repeat_runs.py",
}
INSTALL = "pip install 'transformer[export]' (or: pip install transformers ctranslate2)"


def hf_permutation(d_model: int) -> torch.Tensor:
    """(D,) long: HF's dimension j is our dimension P[j] (sines at our even indices, then cosines at the odd)."""
    return torch.cat([torch.arange(0, d_model, 2), torch.arange(1, d_model, 2)])


def _pieces(tokenizer, side: str) -> list[str]:
    size = tokenizer.src_vocab_size if side == "src" else tokenizer.tgt_vocab_size
    piece = tokenizer.src_piece if side == "src" else tokenizer.tgt_piece
    return [piece(i) for i in range(size)]


def _write_spm(tokenizer, folder: Path) -> tuple[Path, Path]:
    """The SentencePiece model(s) as files: (source, target); the same file when the vocabulary is joint."""
    blobs = tokenizer.to_bytes()
    src = folder / "source.spm"
    src.write_bytes(blobs["src"])
    tgt = folder / "target.spm"
    tgt.write_bytes(blobs["tgt"] if blobs["tgt"] is not None else blobs["src"])
    return src, tgt


# ---------------------------------------------------------------------------------------------- Hugging Face


def check_hf(model_config) -> None:
    """A `UserError` naming the first architectural choice Marian / Pegasus cannot express."""
    if model_config.positional != "sinusoidal":
        raise UserError(
            "cannot export learned positions to Hugging Face: Marian and Pegasus recompute fixed sinusoids on "
            "load; use --format ctranslate2, which keeps the learned table"
        )
    if not model_config.share_embeddings:
        raise UserError("the Hugging Face export needs one shared source/target embedding (share_embeddings: true)")
    if model_config.layer_norm_eps != 1e-5:
        raise UserError(f"Marian and Pegasus use LayerNorm epsilon 1e-5; this model has {model_config.layer_norm_eps}")


def _hf_config(model_config, vocab_size: int, bos_id: int = BOS_ID):
    from transformers import MarianConfig, PegasusConfig

    fields = marian_fields(model_config, vocab_size, bos_id=bos_id)
    if model_config.norm_first:
        return PegasusConfig(**fields)
    return MarianConfig(decoder_vocab_size=vocab_size, share_encoder_decoder_embeddings=True, **fields)


def hf_state_dict(model, norm_first: bool) -> dict[str, torch.Tensor]:
    """Our weights under Marian / Pegasus names, the model dimension permuted by `hf_permutation` throughout."""
    D = model.encoder.embedding.weight.size(1)
    P = hf_permutation(D)
    rows = lambda t: t.detach()[P].clone()  # writes the residual stream: output side (D, ...) or (D,)
    cols = lambda t: t.detach()[:, P].clone()  # reads the residual stream: input side (..., D)
    plain = lambda t: t.detach().clone()
    out = {"model.shared.weight": cols(model.encoder.embedding.weight)}  # (V, D)
    for name, stack in (("encoder", model.encoder), ("decoder", model.decoder)):
        out[f"model.{name}.embed_tokens.weight"] = out["model.shared.weight"]
        for i, layer in enumerate(stack.layers):
            p = f"model.{name}.layers.{i}"
            blocks = [("self_attn", layer.self_attn, layer.self_attn_norm)]
            if name == "decoder":
                blocks.append(("encoder_attn", layer.cross_attn, layer.cross_attn_norm))
            for hf_name, attn, norm in blocks:
                if attn.self_attention:
                    weights = attn.qkv_proj.weight.chunk(3)  # 3 x (D, D): Q, K, V
                    biases = attn.qkv_proj.bias.chunk(3)
                else:
                    weights = (attn.q_proj.weight, *attn.kv_proj.weight.chunk(2))
                    biases = (attn.q_proj.bias, *attn.kv_proj.bias.chunk(2))
                for proj, weight, bias in zip(("q_proj", "k_proj", "v_proj"), weights, biases):
                    out[f"{p}.{hf_name}.{proj}.weight"], out[f"{p}.{hf_name}.{proj}.bias"] = cols(weight), plain(bias)
                out[f"{p}.{hf_name}.out_proj.weight"] = rows(attn.out_proj.weight)
                out[f"{p}.{hf_name}.out_proj.bias"] = rows(attn.out_proj.bias)
                out[f"{p}.{hf_name}_layer_norm.weight"], out[f"{p}.{hf_name}_layer_norm.bias"] = (
                    rows(norm.weight),
                    rows(norm.bias),
                )
            out[f"{p}.fc1.weight"], out[f"{p}.fc1.bias"] = cols(layer.ff.linear1.weight), plain(layer.ff.linear1.bias)
            out[f"{p}.fc2.weight"], out[f"{p}.fc2.bias"] = rows(layer.ff.linear2.weight), rows(layer.ff.linear2.bias)
            out[f"{p}.final_layer_norm.weight"] = rows(layer.ff_norm.weight)
            out[f"{p}.final_layer_norm.bias"] = rows(layer.ff_norm.bias)
        if norm_first:
            out[f"model.{name}.layer_norm.weight"] = rows(stack.final_norm.weight)
            out[f"model.{name}.layer_norm.bias"] = rows(stack.final_norm.bias)
    out["lm_head.weight"] = cols(model.output_proj.weight)  # (V, D)
    bias = model.output_proj.bias  # (V,) or None (the paper's)
    out["final_logits_bias"] = torch.zeros(1, model.output_proj.weight.size(0)) if bias is None else plain(bias)[None]
    return out


def _generation_config(decode, max_positions: int, bos_id: int = BOS_ID):
    """Our decoding settings as far as `generate` expresses them (engine_settings.py says what it cannot)."""
    from transformers import GenerationConfig

    return GenerationConfig(**engine_settings(decode, "hf", max_positions, bos_id).arguments)


def write_settings(settings, decode, output: Path) -> None:
    """decoding.json: the checkpoint's decoding settings, the engine's, and those it will not apply; for Hugging
    Face also the file of the logits processor that applies the run limit (decoding/repeat_runs.py)."""
    (output / "decoding.json").write_text(json.dumps(settings.record(decode), indent=2) + "\n", encoding="utf-8")
    if settings.processors:
        shutil.copyfile(repeat_runs.__file__, output / "repeat_runs.py")


def hf_model_from_ours(model, config, bos_id: int = BOS_ID):
    """The `MarianMTModel` (post-LN) or `PegasusForConditionalGeneration` (pre-LN) computing what `model` computes."""
    check_hf(config.model)
    try:
        from transformers import MarianMTModel, PegasusForConditionalGeneration
    except ImportError:
        raise UserError(f"--format hf needs Hugging Face transformers: {INSTALL}") from None
    hf_class = PegasusForConditionalGeneration if config.model.norm_first else MarianMTModel
    hf_model = hf_class(_hf_config(config.model, model.output_proj.weight.size(0), bos_id)).eval()
    missing, unexpected = hf_model.load_state_dict(hf_state_dict(model, config.model.norm_first), strict=False)
    missing = [k for k in missing if not k.endswith("embed_positions.weight")]
    if missing or unexpected:  # a transformers version with other names: refuse rather than export half a model
        raise UserError(
            f"this transformers version names its weights differently (missing {missing[:3]}, "
            f"unexpected {unexpected[:3]}); install a transformers >= 4.40"
        )
    P = hf_permutation(config.model.d_model)
    ours = model.decoder.positional.table[: config.model.max_positions][:, P]  # (L, D) in HF's layout
    theirs = hf_model.model.decoder.embed_positions.weight
    if not torch.allclose(ours, theirs, atol=1e-5):
        raise UserError("this transformers version's sinusoid table differs from the paper's; cannot export")
    hf_model.generation_config = _generation_config(config.decode, config.model.max_positions, bos_id)
    return hf_model


def export_hf(model, tokenizer, config, output: Path) -> None:
    """Write a `from_pretrained` directory: config, safetensors weights, generation config, MarianTokenizer."""
    hf_model = hf_model_from_ours(model, config, tokenizer.bos_id)
    from transformers import MarianTokenizer

    output.mkdir(parents=True, exist_ok=True)
    hf_model.save_pretrained(output, safe_serialization=True)
    settings = engine_settings(config.decode, "hf", config.model.max_positions, tokenizer.bos_id)
    write_settings(settings, config.decode, output)
    with tempfile.TemporaryDirectory() as tmp:
        src, tgt = _write_spm(tokenizer, Path(tmp))
        vocab = Path(tmp) / "vocab.json"
        vocab.write_text(json.dumps({p: i for i, p in enumerate(_pieces(tokenizer, "tgt"))}, ensure_ascii=False))
        hf_tokenizer = MarianTokenizer(
            source_spm=str(src),
            target_spm=str(tgt),
            vocab=str(vocab),
            source_lang=config.data.src_lang,
            target_lang=config.data.tgt_lang,
            unk_token=tokenizer.tgt_piece(UNK_ID),
            eos_token=tokenizer.tgt_piece(EOS_ID),
            pad_token=tokenizer.tgt_piece(PAD_ID),
            model_max_length=config.model.max_positions,
        )
        hf_tokenizer.save_pretrained(output)


# ------------------------------------------------------------------------------------------------ CTranslate2


def _set_linear(spec, linear: torch.nn.Linear) -> None:
    spec.weight = linear.weight.detach().float().numpy().copy()
    if linear.bias is not None:
        spec.bias = linear.bias.detach().float().numpy().copy()


def _set_norm(spec, norm: torch.nn.LayerNorm) -> None:
    spec.gamma = norm.weight.detach().float().numpy().copy()
    spec.beta = norm.bias.detach().float().numpy().copy()


def _positions(stack, max_positions: int):
    module = stack.positional
    table = module.table if isinstance(module, SinusoidalPositionalEncoding) else module.weight  # or learned
    return table[:max_positions].detach().float().numpy().copy()  # (L, D)


def _set_stack(spec, stack, max_positions: int, norm_first: bool) -> None:
    spec.scale_embeddings = stack.embedding.scale != 1.0  # x sqrt(d_model), as TokenEmbedding (model.scale_embedding)
    spec.position_encodings.encodings = _positions(stack, max_positions)
    if norm_first:
        _set_norm(spec.layer_norm, stack.final_norm)
    for layer_spec, layer in zip(spec.layer, stack.layers):
        _set_linear(layer_spec.self_attention.linear[0], layer.self_attn.qkv_proj)  # fused (3D, D): Q, K, V
        _set_linear(layer_spec.self_attention.linear[1], layer.self_attn.out_proj)
        _set_norm(layer_spec.self_attention.layer_norm, layer.self_attn_norm)
        if isinstance(layer, DecoderLayer):
            _set_linear(layer_spec.attention.linear[0], layer.cross_attn.q_proj)
            _set_linear(layer_spec.attention.linear[1], layer.cross_attn.kv_proj)  # fused (2D, D): K, V
            _set_linear(layer_spec.attention.linear[2], layer.cross_attn.out_proj)
            _set_norm(layer_spec.attention.layer_norm, layer.cross_attn_norm)
        _set_linear(layer_spec.ffn.linear_0, layer.ff.linear1)
        _set_linear(layer_spec.ffn.linear_1, layer.ff.linear2)
        _set_norm(layer_spec.ffn.layer_norm, layer.ff_norm)


def ctranslate2_spec(model, tokenizer, model_config):
    """A `ctranslate2.specs.TransformerSpec` holding our weights and vocabularies."""
    from ctranslate2.specs import common_spec, transformer_spec

    c = model_config
    activations = {"relu": "RELU", "gelu": "GELU", "silu": "SWISH"}
    activation = getattr(common_spec.Activation, activations[c.activation])
    spec = transformer_spec.TransformerSpec.from_config(
        (c.n_encoder_layers, c.n_decoder_layers), c.n_heads, pre_norm=c.norm_first, activation=activation
    )
    spec.encoder.embeddings[0].weight = model.encoder.embedding.weight.detach().float().numpy().copy()
    spec.decoder.embeddings.weight = model.decoder.embedding.weight.detach().float().numpy().copy()
    _set_stack(spec.encoder, model.encoder, c.max_positions, c.norm_first)
    _set_stack(spec.decoder, model.decoder, c.max_positions, c.norm_first)
    _set_linear(spec.decoder.projection, model.output_proj)
    spec.register_source_vocabulary(_pieces(tokenizer, "src"))
    spec.register_target_vocabulary(_pieces(tokenizer, "tgt"))
    spec.config.layer_norm_epsilon = c.layer_norm_eps
    spec.config.add_source_bos, spec.config.add_source_eos = False, False  # callers pass pieces + "</s>"
    spec.config.bos_token, spec.config.eos_token = tokenizer.tgt_piece(BOS_ID), tokenizer.tgt_piece(EOS_ID)
    spec.config.unk_token = tokenizer.tgt_piece(UNK_ID)
    spec.config.decoder_start_token = tokenizer.tgt_piece(getattr(tokenizer, "bos_id", BOS_ID))
    return spec


def export_ctranslate2(
    model, tokenizer, config, output: Path, quantization: str | None = None, *, spm: bool = True
) -> None:
    """Write a `ctranslate2.Translator` directory (weights in `quantization`, default float32) and the .spm files.

    `tokenizer` needs only `src_piece`, `tgt_piece` and the vocabulary sizes when `spm` is False.
    """
    try:
        import ctranslate2.converters
    except ImportError:
        raise UserError(f"--format ctranslate2 needs CTranslate2: {INSTALL}") from None
    spec = ctranslate2_spec(model, tokenizer, config.model)

    class _SpecConverter(ctranslate2.converters.Converter):
        def _load(self):
            return spec

    _SpecConverter().convert(str(output), quantization=quantization, force=True)
    write_settings(engine_settings(config.decode, "ctranslate2", config.model.max_positions), config.decode, output)
    if spm:
        _write_spm(tokenizer, output)


def export_checkpoint(checkpoint: str | Path, fmt: str, output: str | Path, quantization: str | None = None) -> Path:
    """Load `checkpoint` (weights_only) and write it to `output` in `fmt` ("hf" or "ctranslate2")."""
    from transformer.checkpoint import build_model, load_checkpoint

    if fmt not in FORMATS:
        raise UserError(f"unknown export format {fmt!r}: use {' or '.join(FORMATS)}")
    if quantization and fmt != "ctranslate2":
        raise UserError("--quantization applies to --format ctranslate2 only")
    if quantization and quantization not in CT2_QUANTIZATIONS:
        raise UserError(f"unknown --quantization {quantization!r}: use one of {', '.join(CT2_QUANTIZATIONS)}")
    output = Path(output)
    if output.exists() and not output.is_dir():
        raise UserError(f"--output {output} exists and is not a directory")
    foreign = sorted(p.name for p in output.iterdir() if p.name not in EXPORT_FILES) if output.is_dir() else []
    if foreign:  # CTranslate2's converter empties the directory first: never on someone's files
        raise UserError(
            f"--output {output} holds files an export did not write ({', '.join(foreign[:3])}); "
            "choose a new or empty directory"
        )
    model, tokenizer, config = build_model(load_checkpoint(checkpoint), "cpu")
    if fmt == "hf":
        export_hf(model, tokenizer, config, output)
    else:
        export_ctranslate2(model, tokenizer, config, output, quantization)
    note = engine_settings(config.decode, fmt, config.model.max_positions, tokenizer.bos_id).note(config.decode)
    if note:
        log.warning(note)
    return output
