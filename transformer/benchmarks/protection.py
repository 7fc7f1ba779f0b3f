"""Protected spans measured (scripts/benchmark_protection.py): software messages with placeholders, and ordinary
text, translated with protection on and off.

- Messages: the Spanish translations (msgstr) of gettext catalogues (.mo files read with polib), those that hold a
  placeholder, a URL, an option or a path, one line each; each is translated back into English. A message keeps
  its placeholders when every printf, brace and shell placeholder, URL, e-mail address and `--option` of it
  (`PLACEHOLDERS`, a regular expression of this module, independent of documents/spans.py) comes out as many
  times as it went in.
- Ordinary text: a test set's BLEU and chrF (sacreBLEU) with protection on and off; and the time per line of both.
"""

from __future__ import annotations

import random
import re
import time
from pathlib import Path

PLACEHOLDERS = re.compile(
    r"%(?:\(\w+\))?[-+#0]*\d*(?:\.\d+)?(?:l|ll|h|z)?[sdifuxXcpeEgG%]|%\d+\$[sd]|\{[^{}\s]*\}"
    r"|https?://\S+?(?=[\s,;)]|\.?$)|[\w.+-]+@[\w-]+\.[\w.]+\w|(?<![\w-])--[A-Za-z][\w-]*"
)


def placeholders(text: str) -> list[str]:
    """What must come out of a message as it went in, sorted (the module docstring)."""
    return sorted(PLACEHOLDERS.findall(text))


def catalogue_messages(folder: str | Path, count: int, seed: int = 1) -> tuple[list[str], list[str]]:
    """(messages, catalogue names): up to `count` distinct one-line msgstr of the .mo files in `folder` that hold a
    placeholder, drawn at random (seeded) from all of them."""
    import polib

    found, names = set(), []
    for path in sorted(Path(folder).glob("*.mo")):
        try:
            catalogue = polib.mofile(str(path))
        except (OSError, ValueError):
            continue
        names.append(path.stem)
        for entry in catalogue:
            texts = [entry.msgstr, *entry.msgstr_plural.values()]
            found |= {t for t in texts if t and "\n" not in t.strip() and placeholders(t) and len(t) < 300}
    messages = sorted(found)
    random.Random(seed).shuffle(messages)
    return [m.strip() for m in messages[:count]], names


def kept_share(sources: list[str], outputs: list[str]) -> float:
    """The share of messages whose placeholders all come out exactly (as many times each)."""
    kept = sum(placeholders(s) == placeholders(o) for s, o in zip(sources, outputs))
    return kept / max(len(sources), 1)


def timed(translator, lines: list[str], protect: bool) -> tuple[list[str], float]:
    """(translations, seconds per line) of `lines` with protection on or off."""
    start = time.perf_counter()
    out = translator.translate(lines, protect=protect)
    return out, (time.perf_counter() - start) / max(len(lines), 1)


def measure(translator, messages: list[str], sources: list[str], references: list[str]) -> dict:
    """The figures: placeholders kept on messages, BLEU and chrF of the test set, time per line, off and on (after
    a warm-up; each timing the faster of two runs for the messages, one for the test set)."""
    import sacrebleu

    translator.translate(messages[:20] + sources[:20])  # warm-up: the CPU copies, the allocator
    record: dict = {"messages": len(messages), "test_lines": len(sources), "examples": []}
    outputs = {}
    for protect in (False, True):
        name = "on" if protect else "off"
        runs = [timed(translator, messages, protect) for _ in range(2)]
        out, per_line = runs[0][0], min(seconds for _, seconds in runs)
        record[f"messages_kept_{name}"] = round(kept_share(messages, out), 4)
        record[f"messages_ms_per_line_{name}"] = round(1000 * per_line, 2)
        record["examples"] += [[m, o, name] for m, o in list(zip(messages, out))[:5]]
        out, per_line = timed(translator, sources, protect)
        outputs[name] = out
        record[f"test_bleu_{name}"] = round(sacrebleu.corpus_bleu(out, [references]).score, 2)
        record[f"test_chrf_{name}"] = round(sacrebleu.corpus_chrf(out, [references]).score, 2)
        record[f"test_ms_per_line_{name}"] = round(1000 * per_line, 2)
    record["test_lines_identical"] = sum(a == b for a, b in zip(outputs["on"], outputs["off"]))
    return record
