"""A checkpoint's decoding settings as an exported engine takes them: what it is given, what it cannot apply.

`engine_settings(decode, engine, max_positions)` says, for Hugging Face `generate` ("hf") or CTranslate2's
`translate_batch` ("ctranslate2"):
- `arguments`: the engine's own settings that match ours (HF: the fields of generation_config.json, which `generate`
  reads by itself; CTranslate2: `translate_batch` keyword arguments, which its directory cannot hold);
- `processors`: what a logits processor shipped with the export applies (HF only: `decode.max_ngram_repeats`,
  decoding/repeat_runs.py's `RepeatRunLogitsProcessor`, which the caller passes to `generate`);
- `not_applied`: each setting the engine will not apply, with what it does instead;
- `matched`: the decoding settings under which `transformer-translate` computes what the engine computes (the
  checkpoint's, with `not_applied`'s set to the engine's behaviour, where a setting of ours can express it): the
  tests compare the engines with it.
A setting that changes nothing where it stands is not listed (a length penalty in greedy search, the run limit
when it is off). Settings of our own batching and steering (`max_tokens`, the constraint and glossary beams) change
no output of a plain line, so they have no place here. The export writes all of it to decoding.json in its folder
and names `not_applied` in one line (export.py).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field

from transformer.config import DecodeConfig
from transformer.data.tokenizer import BOS_ID, EOS_ID, PAD_ID

ENGINE_NAMES = {"hf": "Hugging Face generate", "ctranslate2": "CTranslate2"}


@dataclass(frozen=True)
class EngineSettings:
    engine: str  # "hf" or "ctranslate2"
    arguments: dict  # the engine's settings (see the module docstring)
    processors: dict = field(default_factory=dict)  # setting -> value, applied by a shipped logits processor
    not_applied: dict = field(default_factory=dict)  # setting -> what the engine does instead
    matched: dict = field(default_factory=dict)  # decode overrides under which ours computes what the engine does

    def record(self, decode: DecodeConfig) -> dict:
        """What decoding.json holds: the checkpoint's settings and these."""
        return {"checkpoint": dataclasses.asdict(decode), **dataclasses.asdict(self)}

    def note(self, decode: DecodeConfig) -> str | None:
        """The one line `transformer-export` writes when the engine leaves settings out; None when it applies all."""
        if not self.not_applied:
            return None
        names = ", ".join(f"{name}={getattr(decode, name)}" for name in self.not_applied)
        return (
            f"note: {ENGINE_NAMES[self.engine]} will not apply {len(self.not_applied)} of the checkpoint's decoding "
            f"settings ({names}); decoding.json in the export records them and what it does instead "
            '(docs/decoding.md, "Export and deployment")'
        )


def _lengths(decode: DecodeConfig, max_positions: int) -> tuple[int, dict, dict]:
    """(the engine's one maximum output length, not_applied, matched) for ours, floor(a * S + b) per sentence."""
    cap = max_positions - 1
    if decode.max_len_a == 0:
        return min(decode.max_len_b, cap), {}, {}
    why = f"a maximum output length of a * S + b per sentence: the engine stops every sentence at {cap} pieces"
    return cap, {"max_len_a": why}, {"max_len_a": 0.0, "max_len_b": cap}


def _shared(decode: DecodeConfig, max_positions: int) -> tuple[dict, dict, int]:
    """(not_applied, matched, the maximum output length) alike in both engines."""
    not_applied, matched = {}, {}
    if decode.beam_size > 1 and decode.length_penalty == "gnmt" and decode.alpha > 0:
        not_applied["length_penalty"] = "gnmt ((5 + len) / 6)^alpha: the engine divides by len^alpha (fairseq's)"
        matched["length_penalty"] = "fairseq"
    longest, lengths_left, lengths_matched = _lengths(decode, max_positions)
    not_applied |= lengths_left
    matched |= lengths_matched
    if decode.sampling:
        not_applied["sampling"] = "the engine searches (beam or greedy) with the other settings"
        matched["sampling"] = False
    if decode.fold_capitals:
        not_applied["fold_capitals"] = (
            "transformer-translate folds a line in capitals; the model alone translates it as written"
        )
        matched["fold_capitals"] = False
    if decode.precision != "fp32":
        not_applied["precision"] = "the engine computes in the type its weights are loaded in (float32 by default)"
        matched["precision"] = "fp32"
    return not_applied, matched, longest


def _alpha(decode: DecodeConfig) -> float:
    """The engines' length penalty exponent: len^alpha, 0 for none (len^0 = 1)."""
    return 0.0 if decode.length_penalty == "none" else float(decode.alpha)


def engine_settings(decode: DecodeConfig, engine: str, max_positions: int, bos_id: int = BOS_ID) -> EngineSettings:
    """The checkpoint's `decode` settings for `engine` (see the module docstring)."""
    not_applied, matched, longest = _shared(decode, max_positions)
    min_len = max(decode.min_len, 1)  # ours never gives an empty translation (decoding/search.py)
    if engine == "hf":
        banned = [[PAD_ID]] + ([[bos_id]] if bos_id != PAD_ID else [])  # never generated, as in our search
        arguments = dict(
            num_beams=decode.beam_size,
            num_return_sequences=decode.nbest,
            early_stopping=True,
            length_penalty=_alpha(decode),
            max_new_tokens=longest,
            min_new_tokens=min_len,
            no_repeat_ngram_size=decode.no_repeat_ngram_size,
            bad_words_ids=banned,
            decoder_start_token_id=bos_id,
            bos_token_id=bos_id,
            eos_token_id=EOS_ID,
            pad_token_id=PAD_ID,
            forced_eos_token_id=None,
        )
        processors = {"max_ngram_repeats": decode.max_ngram_repeats} if decode.max_ngram_repeats else {}
        return EngineSettings(engine, arguments, processors, not_applied, matched)
    if decode.max_ngram_repeats:
        not_applied["max_ngram_repeats"] = "CTranslate2 takes no logits processor: runs of repeated n-grams are kept"
        matched["max_ngram_repeats"] = 0
    if decode.beam_size > 1 and decode.no_repeat_ngram_size:  # no setting of ours matches: none in `matched`
        not_applied["no_repeat_ngram_size"] = (
            "banned before CTranslate2's softmax: the beam's scores are renormalised over the pieces left, ours not"
        )
    arguments = dict(
        beam_size=decode.beam_size,
        num_hypotheses=decode.nbest,
        length_penalty=_alpha(decode),
        max_decoding_length=longest,
        min_decoding_length=min_len,
        no_repeat_ngram_size=decode.no_repeat_ngram_size,
    )
    return EngineSettings(engine, arguments, {}, not_applied, matched)
