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


def scan_seconds(lines: list[str]) -> float:
    """Seconds per line of finding a line's spans and masking them (what protection adds to a line without any)."""
    from transformer.documents.lines import ProtectedLine
    from transformer.documents.spans import Protection

    protection = Protection()
    start = time.perf_counter()
    for line in lines:
        ProtectedLine(line, protection)
    return (time.perf_counter() - start) / max(len(lines), 1)


def measure(translator, messages: list[str], sources: list[str], references: list[str], rounds: int = 2) -> dict:
    """The figures: placeholders kept on messages, BLEU and chrF of the test set, time per line, off and on. The
    timings alternate off and on for `rounds` rounds after a warm-up, and keep each one's fastest (a shared machine's
    load changes under a long run)."""
    import sacrebleu

    translator.translate(messages[:20] + sources[:20])  # warm-up: the CPU copies, the allocator
    record: dict = {"messages": len(messages), "test_lines": len(sources), "examples": []}
    outputs: dict = {}
    times: dict = {}
    for _ in range(rounds):
        for protect in (False, True):
            for kind, lines in (("messages", messages), ("test", sources)):
                out, per_line = timed(translator, lines, protect)
                key = (kind, "on" if protect else "off")
                outputs[key], times[key] = out, min(per_line, times.get(key, per_line))
    for name in ("off", "on"):
        record[f"messages_kept_{name}"] = round(kept_share(messages, outputs["messages", name]), 4)
        record["examples"] += [[m, o, name] for m, o in list(zip(messages, outputs["messages", name]))[:5]]
        out = outputs["test", name]
        record[f"test_bleu_{name}"] = round(sacrebleu.corpus_bleu(out, [references]).score, 2)
        record[f"test_chrf_{name}"] = round(sacrebleu.corpus_chrf(out, [references]).score, 2)
        for kind in ("messages", "test"):
            record[f"{kind}_ms_per_line_{name}"] = round(1000 * times[kind, name], 2)
    record["test_lines_identical"] = sum(a == b for a, b in zip(outputs["test", "on"], outputs["test", "off"]))
    record["scan_us_per_line_test"] = round(1e6 * scan_seconds(sources), 1)
    record["scan_us_per_line_messages"] = round(1e6 * scan_seconds(messages), 1)
    return record
