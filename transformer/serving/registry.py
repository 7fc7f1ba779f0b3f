"""The models of one server: a registry from (source, target) to an engine, and the routes between languages.

- Each model serves the pair its checkpoint's config names (`data.src_lang`, `data.tgt_lang`); an ensemble is one
  model. Two models for one pair are refused at start (`Registry` raises a UserError naming both).
- A route is decided before any engine runs (`route`): the direct model when there is one, else two models
  through the pivot language (`--pivot`, default en; LibreTranslate's way to reach a pair through English): the
  source's model into the pivot, then the pivot's into the target. An engine never knows it is one of several.
- `languages()`: LibreTranslate's /languages, every language of every model with the targets it reaches, direct
  and pivoted.
Errors are LibreTranslate's: an unknown code is `'xx' is not supported`; a known source that reaches no such
target is `German (de) is not available as a target language from Spanish (es)`, with what a pivot lacks.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

from transformer.errors import UserError
from transformer.serving.requests import ApiError, short

CODE = re.compile(r"[A-Za-z]{2,8}([-_][A-Za-z0-9]{1,8})*")  # a language code: es, en, pt-BR, zh_Hant, en-target
Pair = tuple[str, str]
NAMES = {  # ISO 639-1 code -> English name, for /languages; other codes are named by themselves
    "ar": "Arabic",
    "cs": "Czech",
    "da": "Danish",
    "de": "German",
    "el": "Greek",
    "en": "English",
    "es": "Spanish",
    "fi": "Finnish",
    "fr": "French",
    "he": "Hebrew",
    "hi": "Hindi",
    "hu": "Hungarian",
    "it": "Italian",
    "ja": "Japanese",
    "ko": "Korean",
    "la": "Latin",
    "nl": "Dutch",
    "pl": "Polish",
    "pt": "Portuguese",
    "ro": "Romanian",
    "ru": "Russian",
    "sv": "Swedish",
    "tr": "Turkish",
    "uk": "Ukrainian",
    "zh": "Chinese",
}


def name(code: str) -> str:
    return NAMES.get(code, code)


@dataclass
class Model:
    """One pair's engine and what the start-up lines and /metrics say of it."""

    engine: Any  # serving.engine.Engine, or any object with its interface
    checkpoints: tuple[str, ...] = ()  # the files it was loaded from
    memory_bytes: int = 0  # its parameters and buffers
    pair: Pair = field(init=False)

    def __post_init__(self) -> None:
        self.pair = tuple(self.engine.languages)

    @property
    def label(self) -> str:
        return f"{self.pair[0]}-{self.pair[1]}"


class Registry:
    """The server's models by pair, and the routes between its languages (through `pivot`, None: no pivoting)."""

    def __init__(self, models: list[Model], pivot: str | None = "en") -> None:
        if not models:
            raise UserError("no model to serve: give --model CKPT (or --checkpoint CKPT)")
        self.models: dict[Pair, Model] = {}
        for model in models:
            for code in model.pair:
                if not isinstance(code, str) or not CODE.fullmatch(code):
                    raise UserError(
                        f"{', '.join(model.checkpoints) or 'a model'}: its config names no language code "
                        f"(data.src_lang, data.tgt_lang: {short(model.pair)}); set them, e.g. es and en"
                    )
            if model.pair in self.models:
                other = self.models[model.pair]
                raise UserError(
                    f"two models for {model.label}: {', '.join(other.checkpoints)} and {', '.join(model.checkpoints)}; "
                    "serve one (several checkpoints after one --model are an ensemble)"
                )
            self.models[model.pair] = model
        self.pivot = pivot or None
        self.codes = list(dict.fromkeys(code for pair in self.models for code in pair))  # in the order given

    @property
    def first(self) -> Model:
        """The first model given (the page's and /frontend/settings' default pair)."""
        return next(iter(self.models.values()))

    @property
    def only(self) -> Model | None:
        """The one model of a one-pair server (None with several)."""
        return next(iter(self.models.values())) if len(self.models) == 1 else None

    def _pivoted(self, source: str, target: str) -> tuple[Pair, Pair] | None:
        via = self.pivot
        if via is None or via in (source, target):
            return None
        legs = ((source, via), (via, target))
        return legs if all(leg in self.models for leg in legs) else None

    def targets(self, source: str) -> list[str]:
        """The languages `source` reaches, direct or through the pivot, in the order given."""
        return [t for t in self.codes if t != source and ((source, t) in self.models or self._pivoted(source, t))]

    @property
    def sources(self) -> list[str]:
        """The languages the server translates from."""
        return [code for code in self.codes if self.targets(code)]

    def languages(self) -> list[dict]:
        """GET/POST /languages: each language with the targets it reaches."""
        return [{"code": code, "name": name(code), "targets": self.targets(code)} for code in self.codes]

    def check_code(self, code: object) -> str:
        """`code` when the server knows it, else LibreTranslate's 400."""
        if not isinstance(code, str) or code not in self.codes:
            raise ApiError(400, f"{short(code)} is not supported")
        return code

    def route(self, source: object, target: object) -> tuple[Model, ...]:
        """The models that translate `source` into `target`, in order (one, or two through the pivot); a 400 when
        a code is unknown, the two are equal, or no route joins them."""
        source, target = self.check_code(source), self.check_code(target)
        if source == target:
            raise ApiError(400, f"Invalid request: source and target are both {source}; choose two languages")
        if (source, target) in self.models:
            return (self.models[source, target],)
        legs = self._pivoted(source, target)
        if legs is not None:
            return tuple(self.models[leg] for leg in legs)
        raise ApiError(
            400,
            f"{name(target)} ({target}) is not available as a target language from {name(source)} ({source})"
            f"{self._why(source, target)}",
        )

    def _why(self, source: str, target: str) -> str:
        via = self.pivot
        if via is None:
            return " (no model for that pair, and pivoting is off: --pivot)"
        if via in (source, target):
            return " (no model for that pair)"
        missing = [f"{a}-{b}" for a, b in ((source, via), (via, target)) if (a, b) not in self.models]
        return f" (no model for that pair, nor {' and '.join(missing)} to pivot through {via})"
