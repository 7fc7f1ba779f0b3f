"""`transformer-translate --format FORMAT --input FILE [--output FILE]`: one document translated whole.

The document is read and parsed first (a file that is not of its format is one error line before the checkpoint
is loaded), then all its sentences translated (transformer/documents/: sentences split, markup placed by word
alignment), then written atomically: the output appears only once the whole document is done. `--format` with no
value (or `auto`) takes the format from the input's extension. The line-by-line flags (TEXT arguments, --nbest,
--alignment, --attention-maps, --prefix-file, --constraints-file) do not apply to a document and are refused;
`--glossary` applies to each sentence. Protected spans (placeholders, URLs, numbers, code, `--protect` patterns) are
kept as written; `--retranslate` translates po and xliff entries already translated again.

Without `--format`, `guess_mode` chooses: an `--input` file whose extension is a document format's (those of
documents.FORMATS, text's aside: .html, .md, .srt, .docx, .po, .xliff, ...) is translated as that document, any
other file line by line as before (.txt among them, and any file given with a flag that works on lines); standard
input is read line by line. The choice is said in one line on stderr.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from transformer.api import SentenceAdapter
from transformer.commands.common import load_translator
from transformer.commands.flags import protection
from transformer.decoding.glossary import Glossary
from transformer.errors import UserError
from transformer.fileio import atomic_output

LINE_FLAGS = {  # flag -> the argparse attribute that is set when it is given
    "TEXT arguments": "text",
    "--nbest": "nbest",
    "--alignment": "alignment",
    "--attention-maps": "attention_maps",
    "--prefix-file": "prefix_file",
    "--constraints-file": "constraints_file",
}


LINE_ONLY = {**LINE_FLAGS, "--confidence": "confidence", "--min-confidence": "min_confidence"}


def guess_mode(args: argparse.Namespace) -> tuple[str | None, str | None]:
    """(the document format to translate `--input` as, or None for line by line; the line that says so, None when
    nothing was guessed): see the module docstring. The caller writes the line on stderr once the work starts (when
    the first translation is made), so that an input refused before then is still refused in one line."""
    if args.format or not args.input or args.input == "-":
        return args.format, None
    from transformer.documents.formats import FORMATS

    suffix = Path(args.input).suffix.lower()
    format = next((name for name, (ext, _) in FORMATS.items() if name != "text" and suffix in ext), None)
    on_lines = [flag for flag, name in LINE_ONLY.items() if getattr(args, name, None) not in (None, False, [])]
    if format and not on_lines:
        how = "from its extension; give it on standard input to translate it line by line"
        return format, f"translating {args.input} as one {format} document, its markup kept ({how})"
    why = f"{', '.join(on_lines)} work on lines" if format else "--format FORMAT translates it as a whole document"
    return None, f"translating {args.input} line by line, one translation per line ({why})"


def translate_file(args: argparse.Namespace, glossary: Glossary | None = None, mode: str | None = None) -> int:
    """The document --input translated whole; `mode`: guess_mode's line, written once the translating starts."""
    from transformer.documents import guess_format, read_document, require
    from transformer.documents.pipeline import translate_segments

    given = [flag for flag, name in LINE_FLAGS.items() if getattr(args, name, None)]
    if given:
        raise UserError(f"--format translates a whole document: {', '.join(given)} apply to lines, not documents")
    if not args.input:
        raise UserError("--format translates a document: give it with --input FILE")
    if args.format == "auto" and args.input == "-":
        raise UserError("--format needs a format name when the document comes from standard input")
    format = guess_format(args.input) if args.format == "auto" else args.format
    require(format)
    to_file = args.output is not None and args.output != "-"
    if format == "docx" and not to_file and sys.stdout.isatty():
        raise UserError("a .docx document is binary: write it to a file with --output FILE")
    protect = protection(args)
    data = sys.stdin.buffer.read() if args.input == "-" else Path(args.input).read_bytes()
    options = dict(attributes=args.translate_attributes, retranslate=args.retranslate)
    parsed = read_document(data, format, name=args.input, **options)
    translator, config, _ = load_translator(args)
    if mode:
        print(mode, file=sys.stderr)
    adapter = SentenceAdapter(translator, glossary)
    outputs = translate_segments(parsed.segments(), adapter, config.data.src_lang, protect)
    result = parsed.rebuild(outputs)
    if to_file:
        with atomic_output(args.output, "wb") as out:
            out.write(result)
    else:
        sys.stdout.flush()
        sys.stdout.buffer.write(result)
        sys.stdout.buffer.flush()
    return 0
