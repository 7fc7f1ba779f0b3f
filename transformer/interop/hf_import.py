"""Import a Hugging Face Marian directory (an OPUS-MT model, or our own export) as a checkpoint of this project.

Legend: D d_model, V vocabulary, P `export.hf_permutation(D)`.

    transformer-import --format hf DIR --output CKPT

DIR is what `MarianMTModel.save_pretrained` and `MarianTokenizer.save_pretrained` write: config.json,
model.safetensors (or pytorch_model.bin), generation_config.json (optional), source.spm, target.spm, vocab.json,
tokenizer_config.json. Only `safetensors` (or torch) reads it: transformers itself is not needed.

Decisions (docs/importing.md has the whole mapping):
- Ids are remapped, once, to the project's: pad -> 0, unk -> 1, eos -> 3, the decoder start token -> 2 when it is
  a token of its own (`<s>`, as in our exports; then nothing moves), and every other id in Marian's order after
  them. Marian starts the decoder with the pad id, so for OPUS-MT models id 2 is an ordinary piece and the
  tokenizer's `bos_id` is 0. The pieces go through one id table (`data/piece_table.py`) as in MarianTokenizer.
- HF lays the sinusoids out as all sines then all cosines; ours interleave them. Our weights are HF's with the
  model dimension permuted by P^-1 (the inverse of what export applies): exact, since LayerNorm, attention and
  the FFN do not depend on the order of the dimensions.
- `activation_function: swish` -> `model.activation: silu`; a non-zero `final_logits_bias` -> `model.output_bias`;
  `scale_embedding: false` -> `model.scale_embedding: false`; untied `lm_head` -> `model.tie_output: false`.
- Refused, one line each: not Marian, a missing file, and shapes we cannot represent (different encoder and
  decoder widths or heads, separate encoder/decoder embeddings, another activation, an extra LayerNorm).
- Trusted nothing: every file's format is checked as it is read (JSON, safetensors, a torch file loaded with
  weights_only), and every tensor's name, shape and dtype against the model config.json describes, before the
  model is built or anything is written (`check_weights`).
- Generation settings as Hugging Face applies them: `max_new_tokens`, else `max_length` less the decoder's start
  token; `min_length` less the start token, or `min_new_tokens`, whichever bans EOS longer.
"""

from __future__ import annotations

import json
from pathlib import Path

import torch

from transformer.checkpoint import model_state, save_checkpoint
from transformer.config import from_dict
from transformer.data.tokenizer import BOS_ID, EOS_ID, PAD_ID, UNK_ID, Tokenizer
from transformer.errors import UserError

ACTIVATIONS = {"relu": "relu", "gelu": "gelu", "swish": "silu", "silu": "silu"}  # HF's name -> ours
TOKENIZER_FILES = ("source.spm", "target.spm", "vocab.json", "tokenizer_config.json")
REQUIRED = (
    "vocab_size",
    "d_model",
    "encoder_layers",
    "decoder_layers",
    "encoder_attention_heads",
    "encoder_ffn_dim",
    "max_position_embeddings",
)


def _read_json(path: Path) -> dict:
    try:
        value = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError, RecursionError) as exc:
        raise UserError(f"{path} is not readable JSON ({str(exc)[:120] or type(exc).__name__})") from None
    if not isinstance(value, dict):
        raise UserError(f"{path} does not hold a JSON object")
    return value


def _need(ok: bool, message: str) -> None:
    if not ok:
        raise UserError(message)


def read_marian_config(folder: Path) -> dict:
    """config.json, checked to be a Marian model whose shape this project's model can hold."""
    _need(folder.is_dir(), f"{folder} is not a directory: give the folder that save_pretrained wrote")
    _need((folder / "config.json").is_file(), f"{folder} has no config.json: not a Hugging Face model directory")
    c = _read_json(folder / "config.json")
    kind = c.get("model_type")
    _need(kind == "marian", f"{folder} holds a {kind!r} model, not Marian (model_type 'marian'): cannot import it")
    missing = [key for key in REQUIRED if not isinstance(c.get(key), int) or isinstance(c.get(key), bool)]
    _need(not missing, f"{folder}/config.json has no integer {', '.join(missing)}: not a complete Marian config")
    below = [f"{key} {c[key]}" for key in REQUIRED if c[key] < 1]
    _need(not below, f"{folder}/config.json: {', '.join(below)}; each must be at least 1")
    pairs = [("encoder_attention_heads", "decoder_attention_heads"), ("encoder_ffn_dim", "decoder_ffn_dim")]
    for enc, dec in pairs:
        _need(
            c.get(enc) == c.get(dec),
            f"{folder}: {enc} {c.get(enc)} != {dec} {c.get(dec)}; our encoder and "
            "decoder share one width and head count, so this model cannot be imported",
        )
    _need(c.get("d_model", 0) % max(c.get("encoder_attention_heads", 1), 1) == 0, f"{folder}: d_model not divisible")
    act = c.get("activation_function", "gelu")
    _need(act in ACTIVATIONS, f"{folder}: activation_function {act!r} has no equivalent here (relu, gelu, swish)")
    shared = c.get("share_encoder_decoder_embeddings", True)
    _need(
        shared,
        f"{folder}: separate encoder and decoder embeddings (share_encoder_decoder_embeddings false) "
        "are not supported by the importer",
    )
    decoder_vocab = c.get("decoder_vocab_size") or c["vocab_size"]
    _need(decoder_vocab == c["vocab_size"], f"{folder}: decoder_vocab_size {decoder_vocab} != vocab_size")
    for flag in ("normalize_before", "add_final_layer_norm", "normalize_embedding"):
        _need(not c.get(flag), f"{folder}: {flag} is set; Marian as this project knows it has no such LayerNorm")
    return c


def read_weights(folder: Path) -> dict[str, torch.Tensor]:
    """model.safetensors (or pytorch_model.bin, read with weights_only), with HF's names: a file that is not what
    its name says (a garbled header, an absurd header length, a pickle of anything but tensors) is a `UserError`."""
    if (path := folder / "model.safetensors").is_file():
        from safetensors import SafetensorError
        from safetensors.torch import load_file

        reader, kind, errors = load_file, "a safetensors file", (SafetensorError, OSError, ValueError, RuntimeError)
    elif (path := folder / "pytorch_model.bin").is_file():
        reader = lambda p: torch.load(p, map_location="cpu", weights_only=True)  # noqa: E731  nothing is executed
        # UnpicklingError (anything but tensors: weights_only executed nothing), a truncated or garbled zip, ...
        kind, errors = "a plain tensor file (torch.load weights_only)", (Exception,)
    else:
        raise UserError(f"{folder} has no model.safetensors or pytorch_model.bin: the weights are missing")
    try:
        weights = reader(path)
    except errors as exc:
        raise UserError(f"{path} is not {kind}: {type(exc).__name__}: {str(exc)[:120]}") from None
    named = isinstance(weights, dict) and all(isinstance(k, str) for k in weights)
    _need(named and all(isinstance(v, torch.Tensor) for v in weights.values()), f"{path} is not names to tensors")
    return weights


def expected_shapes(c: dict) -> dict[str, tuple[int, ...]]:
    """Every HF tensor name the import reads or checks, with the shape config.json gives it."""
    V, D, F, L = c["vocab_size"], c["d_model"], c["encoder_ffn_dim"], c["max_position_embeddings"]
    shapes = {name: (V, D) for name in ("model.shared.weight", "lm_head.weight")}
    shapes |= {f"model.{s}.embed_tokens.weight": (V, D) for s in ("encoder", "decoder")}
    shapes |= {f"model.{s}.embed_positions.weight": (L, D) for s in ("encoder", "decoder")}
    shapes["final_logits_bias"] = (1, V)
    blocks = {"encoder": ["self_attn"], "decoder": ["self_attn", "encoder_attn"]}
    for name in ("encoder", "decoder"):
        for i in range(c[f"{name}_layers"]):
            p = f"model.{name}.layers.{i}"
            for block in blocks[name]:
                shapes |= {f"{p}.{block}.{x}_proj.weight": (D, D) for x in ("q", "k", "v", "out")}
                shapes |= {f"{p}.{block}.{x}_proj.bias": (D,) for x in ("q", "k", "v", "out")}
                shapes |= {f"{p}.{block}_layer_norm.{w}": (D,) for w in ("weight", "bias")}
            shapes |= {
                f"{p}.fc1.weight": (F, D),
                f"{p}.fc1.bias": (F,),
                f"{p}.fc2.weight": (D, F),
                f"{p}.fc2.bias": (D,),
            }
            shapes |= {f"{p}.final_layer_norm.{w}": (D,) for w in ("weight", "bias")}
    return shapes


def check_weights(weights: dict[str, torch.Tensor], c: dict, folder: Path) -> None:
    """Every tensor's name, shape and dtype against the model config.json describes, before anything is copied:
    no name without a place, none of another shape (`copy_` would broadcast a (1,) bias), none that is not floating
    point, and none missing that the model needs."""
    shapes = expected_shapes(c)
    extra = sorted(set(weights) - set(shapes))
    _need(not extra, f"{folder}: weights this project's model has no place for ({', '.join(extra[:3])})")
    for name, tensor in weights.items():
        _need(
            tuple(tensor.shape) == shapes[name],
            f"{folder}: {name} has shape {tuple(tensor.shape)}, config.json gives {shapes[name]}; cannot import it",
        )
        _need(tensor.is_floating_point(), f"{folder}: {name} holds {tensor.dtype}, not floating-point weights")
    optional = {"final_logits_bias", "model.encoder.embed_positions.weight", "model.decoder.embed_positions.weight"}
    optional |= {f"model.{s}.embed_tokens.weight" for s in ("encoder", "decoder")}
    optional |= {"lm_head.weight"} if c.get("tie_word_embeddings", True) else set()
    if "model.encoder.embed_tokens.weight" in weights:
        optional.add("model.shared.weight")
    missing = sorted(set(shapes) - optional - set(weights))
    _need(not missing, f"{folder}: the weights have no {', '.join(missing[:3])}; not a complete Marian model")


def id_order(c: dict, vocab: dict[str, int], folder: Path) -> tuple[list[int], int]:
    """order[i] = the Marian id of our id i; and our decoder start id (`bos_id`)."""
    V = c["vocab_size"]
    ids = sorted(vocab.values())
    _need(ids == list(range(V)), f"{folder}/vocab.json: ids are not 0..{V - 1} (vocab_size {V}); cannot import it")
    _need("<unk>" in vocab, f"{folder}/vocab.json has no <unk> piece")
    pad, eos, start = (
        c.get("pad_token_id"),
        c.get("eos_token_id"),
        c.get("decoder_start_token_id", c.get("pad_token_id")),
    )
    _need(pad is not None and eos is not None, f"{folder}/config.json names no pad_token_id or eos_token_id")
    specials = {PAD_ID: pad, UNK_ID: vocab["<unk>"], EOS_ID: eos}
    own_start = start not in specials.values()
    if own_start:
        specials[BOS_ID] = start
    _need(len(set(specials.values())) == len(specials), f"{folder}: pad, unk and eos ids must differ")
    rest = iter(i for i in range(V) if i not in specials.values())
    order = [specials[i] if i in specials else next(rest) for i in range(4)] + list(rest)
    return order, BOS_ID if own_start else PAD_ID


def _generation(folder: Path, c: dict) -> dict:
    """The decode section from generation_config.json (else config.json; else HF's defaults)."""
    g = _read_json(folder / "generation_config.json") if (folder / "generation_config.json").is_file() else {}
    get = lambda key, default: g.get(key, c.get(key, default))  # noqa: E731
    max_length = get("max_new_tokens", None) or get("max_length", 20) - 1  # HF counts the decoder start
    beams = get("num_beams", 1)
    # HF bans EOS while the decoder's input (its start token included) is shorter than min_length, and while fewer
    # than min_new_tokens tokens are new: both count here as output tokens, the start token not among them.
    min_len = max(int(get("min_length", 0) or 0) - 1, int(get("min_new_tokens", 0) or 0), 0)
    return dict(
        beam_size=beams,
        length_penalty="fairseq",
        alpha=float(get("length_penalty", 1.0)),
        max_len_a=0.0,
        max_len_b=int(max_length),
        min_len=min_len,
        nbest=1,
    )


def _config(folder: Path, c: dict, weights: dict):
    bias = weights.get("final_logits_bias", torch.zeros(1, c["vocab_size"]))
    tied = c.get("tie_word_embeddings", True)
    model = dict(
        d_model=c["d_model"],
        n_heads=c["encoder_attention_heads"],
        d_ff=c["encoder_ffn_dim"],
        n_encoder_layers=c["encoder_layers"],
        n_decoder_layers=c["decoder_layers"],
        dropout=c.get("dropout", 0.1),
        attention_dropout=c.get("attention_dropout", 0.0),
        activation_dropout=c.get("activation_dropout", 0.0),
        activation=ACTIVATIONS[c.get("activation_function", "gelu")],
        norm_first=False,
        layer_norm_eps=1e-5,
        positional="sinusoidal",
        max_positions=c["max_position_embeddings"],
        share_embeddings=True,
        tie_output=tied,
        scale_embedding=bool(c.get("scale_embedding", False)),
        output_bias=bool(bias.abs().max() > 0),
    )
    t = _read_json(folder / "tokenizer_config.json")
    src, tgt = t.get("source_lang") or "src", t.get("target_lang") or "tgt"
    data = dict(src_lang=src, tgt_lang=tgt if tgt != src else f"{tgt}-target", joint_vocab=True)
    return from_dict({"model": model, "data": data, "decode": _generation(folder, c)})


def read_tokenizer(folder: Path, c: dict) -> tuple[Tokenizer, list[int]]:
    """The tokenizer (source.spm, target.spm, the remapped vocab.json as one id table) and the id order."""
    for name in TOKENIZER_FILES:
        _need((folder / name).is_file(), f"{folder} has no {name}: MarianTokenizer's files are needed too")
    t = _read_json(folder / "tokenizer_config.json")
    _need(not t.get("separate_vocabs"), f"{folder}: separate source and target vocabularies are not supported")
    vocab = _read_json(folder / "vocab.json")
    order, bos_id = id_order(c, vocab, folder)
    pieces = {i: p for p, i in vocab.items()}
    table = [pieces[i] for i in order]
    return Tokenizer(
        (folder / "source.spm").read_bytes(), (folder / "target.spm").read_bytes(), table=table, bos_id=bos_id
    ), order


def _attention(attn, weights: dict, p: str, cols, rows) -> None:
    """One attention block: HF's separate q/k/v into our fused (3D, D) or q + (2D, D) kv, out_proj."""
    w = [cols(weights[f"{p}.{x}_proj.weight"]) for x in "qkv"]  # 3 x (D, D)
    b = [weights[f"{p}.{x}_proj.bias"] for x in "qkv"]  # 3 x (D,)
    if attn.self_attention:
        attn.qkv_proj.weight.copy_(torch.cat(w))
        attn.qkv_proj.bias.copy_(torch.cat(b))
    else:
        attn.q_proj.weight.copy_(w[0])
        attn.q_proj.bias.copy_(b[0])
        attn.kv_proj.weight.copy_(torch.cat(w[1:]))
        attn.kv_proj.bias.copy_(torch.cat(b[1:]))
    attn.out_proj.weight.copy_(rows(weights[f"{p}.out_proj.weight"]))
    attn.out_proj.bias.copy_(rows(weights[f"{p}.out_proj.bias"]))


def _norm(norm, weights: dict, p: str, rows) -> None:
    norm.weight.copy_(rows(weights[f"{p}.weight"]))
    norm.bias.copy_(rows(weights[f"{p}.bias"]))


def _check_positions(weights: dict, c: dict, folder: str) -> None:
    """Saved sinusoid tables (older transformers save them) must be HF's layout of ours: else not Marian's."""
    from transformer.interop.export import hf_permutation
    from transformer.model.embeddings import sinusoid_table

    D, L = c["d_model"], c["max_position_embeddings"]
    for name in ("encoder", "decoder"):
        saved = weights.get(f"model.{name}.embed_positions.weight")
        if saved is not None:
            ours = sinusoid_table(L, D)[:, hf_permutation(D)]
            _need(
                saved.shape == ours.shape and torch.allclose(saved.float(), ours, atol=1e-4),
                f"{folder}: {name}.embed_positions is not Marian's sinusoid table; cannot import it",
            )


def load_marian_weights(model, weights: dict, order: torch.Tensor, c: dict, folder: str) -> None:
    """Copy HF Marian weights into our `model`: vocabulary rows by `order` (ours -> Marian ids), the model
    dimension by P^-1 (HF's dimension j is our P[j], export.hf_permutation), fused Q/K/V and K/V assembled."""
    from transformer.interop.export import hf_permutation

    P_inv = torch.argsort(hf_permutation(c["d_model"]))
    rows = lambda t: t.float()[P_inv]  # noqa: E731  writes the residual stream: (D, ...) or (D,)
    cols = lambda t: t.float()[:, P_inv]  # noqa: E731  reads it: (..., D)
    try:
        with torch.no_grad():
            shared = weights.get("model.shared.weight", weights.get("model.encoder.embed_tokens.weight"))
            model.encoder.embedding.weight.copy_(cols(shared)[order])  # (V, D), shared with the decoder
            for name, stack in (("encoder", model.encoder), ("decoder", model.decoder)):
                for i, layer in enumerate(stack.layers):
                    p = f"model.{name}.layers.{i}"
                    _attention(layer.self_attn, weights, f"{p}.self_attn", cols, rows)
                    _norm(layer.self_attn_norm, weights, f"{p}.self_attn_layer_norm", rows)
                    if name == "decoder":
                        _attention(layer.cross_attn, weights, f"{p}.encoder_attn", cols, rows)
                        _norm(layer.cross_attn_norm, weights, f"{p}.encoder_attn_layer_norm", rows)
                    layer.ff.linear1.weight.copy_(cols(weights[f"{p}.fc1.weight"]))
                    layer.ff.linear1.bias.copy_(weights[f"{p}.fc1.bias"])
                    layer.ff.linear2.weight.copy_(rows(weights[f"{p}.fc2.weight"]))
                    layer.ff.linear2.bias.copy_(rows(weights[f"{p}.fc2.bias"]))
                    _norm(layer.ff_norm, weights, f"{p}.final_layer_norm", rows)
            if not c.get("tie_word_embeddings", True):
                model.output_proj.weight.copy_(cols(weights["lm_head.weight"])[order])
            if model.output_proj.bias is not None:
                model.output_proj.bias.copy_(weights["final_logits_bias"].float()[0, order])
    except (KeyError, RuntimeError, IndexError) as exc:  # check_weights found none of these; a guard
        raise UserError(f"{folder}: the weights do not fit config.json ({type(exc).__name__}: {exc})") from None
    _check_positions(weights, c, folder)


def import_marian(folder: str | Path) -> dict:
    """A checkpoint (a plain dict, as `checkpoint.model_state`) computing what the Marian model in `folder` does."""
    from transformer.model.transformer import Transformer

    folder = Path(folder)
    c = read_marian_config(folder)
    tokenizer, order = read_tokenizer(folder, c)
    weights = read_weights(folder)
    check_weights(weights, c, folder)
    config = _config(folder, c, weights)
    V = len(order)
    model = Transformer.from_config(config.model, src_vocab_size=V, tgt_vocab_size=V, pad_id=PAD_ID)
    load_marian_weights(model, weights, torch.tensor(order), c, str(folder))
    return model_state(model.eval(), config, tokenizer, imported_from=str(folder))


def import_checkpoint(folder: str | Path, output: str | Path) -> str:
    """Import `folder` and write the checkpoint to `output`; returns a one-line summary."""
    state = import_marian(folder)
    save_checkpoint(state, output)
    m = state["config"]["model"]
    return (
        f"Marian {m['n_encoder_layers']}+{m['n_decoder_layers']} layers, d_model {m['d_model']}, "
        f"{m['activation']}, vocabulary {state['vocab']['tgt']}"
    )
