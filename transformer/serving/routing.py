"""A request's route run: its source detected (`source: auto`), then its lines decoded by each model of the
route in turn (registry.py decides the route before any engine runs).

- Pivoting: the first model translates each line into the pivot language (its best hypothesis, with the model's
  own search settings and the request's switches), the second translates that into the target with everything the
  request asked for (n-best and alternatives, search settings, prefixes, constraints and glossary terms: they name
  the target side). Each leg is decoded by its own model's batcher, in turns with that model's other requests;
  the second waits for room in its model's queue (an admitted request is not refused halfway), up to the deadline.
- A pivoted hypothesis (`compose`) is the last leg's text, score, log-probability and tokens; its confidence is the
  product of the two legs' (the translation is right only if both legs are: an independence guess, and never more
  than either); its word alignment, when asked for, is the two legs' composed (source word -> pivot word ->
  target word), so documents place their inline tags through a pivot as through one model.
- Detection (`detect_source`): among the languages that reach the request's target, on the text's first
  detection.DETECT_CHARS characters; text in none of them is a 400 naming the languages served, text with no
  letter is translated as itself (as LibreTranslate answers it) with confidence 0.
"""

from __future__ import annotations

import asyncio
import dataclasses
from typing import TYPE_CHECKING

from transformer.serving.detection import DETECT_CHARS, LanguageDetector, has_letters
from transformer.serving.engine import Settings
from transformer.serving.registry import Model, name
from transformer.serving.requests import ApiError

if TYPE_CHECKING:
    from fastapi import Request


def compose(first, second):
    """The pivoted hypothesis of a first leg's `first` and its second leg's `second` (decoding Translations)."""
    alignment = None
    if first.alignment is not None and second.alignment is not None:
        sources_of: dict[int, list[int]] = {}
        for source_word, pivot_word in first.alignment:
            sources_of.setdefault(pivot_word, []).append(source_word)
        links = {(s, t) for pivot_word, t in second.alignment for s in sources_of.get(pivot_word, [])}
        alignment = sorted(links)
    return dataclasses.replace(second, confidence=first.confidence * second.confidence, alignment=alignment)


async def decode_route(
    service,
    request: Request,
    route: tuple[Model, ...],
    lines: list[str],
    settings: Settings,
    controls: dict[str, list] | None = None,
    *,
    patient: bool = False,
) -> list[list]:
    """Each line's hypotheses through `route` (one model, or two through the pivot), best first."""
    if len(route) == 1:
        return await service.decode(request, lines, settings, controls, pair=route[0].pair, patient=patient)
    into_pivot = Settings(alignment=settings.alignment, alignment_layer=settings.alignment_layer)
    into_pivot = dataclasses.replace(into_pivot, options=settings.options)
    firsts = await service.decode(request, lines, into_pivot, None, pair=route[0].pair, patient=patient)
    middle = [hyps[0].text for hyps in firsts]
    seconds = await service.decode(request, middle, settings, controls, pair=route[1].pair, patient=True)
    return [[compose(first[0], hyp) for hyp in hyps] for first, hyps in zip(firsts, seconds)]


def detect_source(detector: LanguageDetector, texts: list[str], candidates: list[str]) -> tuple[str, float] | None:
    """(the language of `texts` among `candidates`, its confidence in percent); None when they hold no letter; a
    400 when they are in none of the candidates (or the identifier knows none of them). CPU work: run off the
    event loop."""
    text = " ".join(texts)[:DETECT_CHARS]
    if not has_letters(text):
        return None
    ranked = detector.detect(text, among=candidates)
    known = ", ".join(candidates)
    if not ranked:
        raise ApiError(400, f"Invalid request: the language identifier knows none of {known}; give source")
    if detector.foreign(ranked):
        raise ApiError(
            400,
            f"Invalid request: q is in none of the languages this server translates from here ({known}); give source",
        )
    return ranked[0]


async def resolve(service, source: str, target: str, texts: list[str]) -> tuple[tuple[Model, ...] | None, dict | None]:
    """(the route, the `detectedLanguage` entry of `source: auto` else None) of a request from `source` to
    `target`; the route is None when auto finds no letter in `texts` (they are answered as they are)."""
    registry = service.registry
    if source != "auto":
        return registry.route(source, target), None
    target = registry.check_code(target)
    candidates = [code for code in registry.sources if target in registry.targets(code)]
    if not candidates:
        raise ApiError(400, f"{name(target)} ({target}) is not available as a target language from any language")
    found = await asyncio.to_thread(detect_source, service.detector, texts, candidates)
    if found is None:
        return None, {"confidence": 0.0, "language": candidates[0]}
    code, confidence = found
    return registry.route(code, target), {"confidence": round(confidence, 1), "language": code}


async def request_route(service, fields: dict, texts: list[str]) -> tuple[tuple[Model, ...] | None, dict | None]:
    """`resolve` for the native API, whose `source` and `target` may be left out on a one-pair server."""
    source, target = fields.get("source"), fields.get("target")
    if source is None and target is None:
        only = service.registry.only
        if only is None:
            pairs = ", ".join(model.label for model in service.registry.models.values())
            raise ApiError(400, f"Invalid request: this server has several pairs ({pairs}); give source and target")
        return (only,), None
    for field_name, value in (("source", source), ("target", target)):
        if not isinstance(value, str) or not value:
            raise ApiError(400, f"Invalid request: missing {field_name} parameter")
    return await resolve(service, source, target, texts)
