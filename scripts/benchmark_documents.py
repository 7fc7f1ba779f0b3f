"""Documents on a trained model: held-out verses wrapped into each format, translated whole, checked and scored.

    python scripts/benchmark_documents.py --checkpoint runs/demo/averaged.pt [--verses 400] [--json out.json]

For text, HTML, Markdown, SRT and WebVTT (transformer/benchmarks/documents.py builds the fixtures: paragraphs of 3-8
verses, inline tags at random word boundaries, cues of one or two lines): does the output parse again, are its tags
and timings the source's, the chrF of its text without markup against translating the same verses as plain lines
(both against the references, paragraph by paragraph), and in HTML the share of inline tags around exactly the
target words aligned to their source words. A benchmark, not a test: record its output in docs/documents.md.
"""

from __future__ import annotations

import argparse
import datetime
import json
import random
import sys
import time
from pathlib import Path

from transformer import Translator
from transformer.benchmarks import documents as bench
from transformer.commands.cli import user_errors_exit_2
from transformer.data.corpus import read_lines
from transformer.devices import device_name
from transformer.documents import read_document, translate_document


class Recorder:
    """The documents' `SentenceTranslator` over the public API, keeping each (sentence, translation, alignment)."""

    def __init__(self, translator: Translator) -> None:
        self.translator, self.calls = translator, []

    def translate(self, sentences: list[str]) -> list[tuple[str, list]]:
        found = self.translator.translate(sentences, nbest=1, alignment=True)
        pairs = [(hyps[0].text, hyps[0].alignment) for hyps in found]
        self.calls += [(s, text, links) for s, (text, links) in zip(sentences, pairs)]
        return pairs

    def fits(self, sentence: str) -> bool:
        ids = self.translator.tokenizer.encode_src([sentence])[0]
        return len(ids) <= self.translator.model.max_positions


def plain_texts(output: str, wrapped: bench.Wrapped, format: str) -> list[str]:
    """The output's text without markup, one string a paragraph (subtitles: a paragraph's cues joined)."""
    if format == "html":
        return [" ".join(block.text.split()) for block in bench.html_blocks(output)]
    if format == "markdown":
        from markdown_it import MarkdownIt

        inline = [t for t in MarkdownIt("commonmark").parse(output) if t.type == "inline"]
        return [" ".join("".join(c.content or " " for c in t.children or []).split()) for t in inline]
    if format == "text":
        return [" ".join(p.split()) for p in output.split("\n\n") if p.strip()]
    cues = [block.split("\n", 2)[-1] if format == "srt" else block.split("\n", 1)[-1] for block in _cue_blocks(output)]
    out, at = [], 0
    for count in wrapped.cues:
        out.append(" ".join(" ".join(cues[at : at + count]).split()))
        at += count
    return out


def _cue_blocks(document: str) -> list[str]:
    return [b for b in document.strip().split("\n\n") if "-->" in b]


def measure(translator: Translator, verses: list[str], refs: list[str], format: str, seed: int) -> dict:
    rng = random.Random(seed)
    groups = bench.paragraphs(len(verses), rng)
    wrapped = {
        "html": lambda: bench.wrap_html(verses, groups, rng),
        "markdown": lambda: bench.wrap_markdown(verses, groups, rng),
        "text": lambda: bench.wrap_text(verses, groups),
        "srt": lambda: bench.wrap_subtitles(verses, groups, "srt", rng),
        "vtt": lambda: bench.wrap_subtitles(verses, groups, "vtt", rng),
    }[format]()
    recorder, start = Recorder(translator), time.perf_counter()
    output = translate_document(wrapped.document, format, recorder, language=translator.config.data.src_lang)
    record = {"format": format, "paragraphs": len(groups), "seconds": round(time.perf_counter() - start, 1)}
    read_document(output, format)  # raises if the output does not parse
    record["parses"] = True
    if format in ("html", "markdown"):
        source, kept = bench.tag_multiset(wrapped.document, format), bench.tag_multiset(output, format)
        record["tags_kept"] = kept == source
        record["tags_lost"] = {"of": sum(source.values()), "lost": sum((source - kept).values())}
    if format in ("srt", "vtt"):
        record["timings_kept"] = bench.timings(output) == bench.timings(wrapped.document)
    references = [" ".join(refs[v] for v in group) for group in groups]
    record["chrf"] = bench.chrf(plain_texts(output, wrapped, format), references)
    if format == "html":
        record["tag_placement"] = bench.tag_agreement(wrapped, output, recorder.calls)
    return record


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--checkpoint", required=True)
    parser.add_argument(
        "--test", default="data/bible-es-en/test.tsv.xz", help="held-out verses: ref<TAB>source<TAB>target"
    )
    parser.add_argument("--verses", type=int, default=400, help="the first N verses of --test")
    parser.add_argument("--formats", default="text,html,markdown,srt,vtt")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--json", help="write the record here")
    args = parser.parse_args(argv)
    pairs = [line.split("\t") for line in read_lines(args.test, args.verses)]
    verses, refs = [p[1].strip() for p in pairs], [p[2].strip() for p in pairs]  # reference, Spanish, English
    translator = Translator.from_checkpoint(args.checkpoint)
    plain = translator.translate(verses)
    rng = random.Random(args.seed)
    groups = bench.paragraphs(len(verses), rng)
    lines_chrf = bench.chrf(
        [" ".join(plain[v] for v in g) for g in groups], [" ".join(refs[v] for v in g) for g in groups]
    )
    record = {
        "kind": "documents",
        "checkpoint": args.checkpoint,
        "device": device_name(),
        "date": datetime.date.today().isoformat(),
        "command": "python " + " ".join(sys.argv),
        "verses": len(verses),
        "plain_lines_chrf": lines_chrf,
        "formats": [measure(translator, verses, refs, f, args.seed) for f in args.formats.split(",")],
    }
    print(json.dumps(record, indent=1))
    if args.json:
        Path(args.json).parent.mkdir(parents=True, exist_ok=True)
        Path(args.json).write_text(json.dumps(record, indent=1) + "\n", "utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(user_errors_exit_2(main)(sys.argv[1:]))
