"""`transformer-translate --format FORMAT --input FILE [--output FILE]`: one document translated whole.

The document is read and parsed first (a file that is not of its format is one error line before the checkpoint
is loaded), then all its sentences translated (transformer/documents/: sentences split, markup placed by word
alignment), then written atomically: the output appears only once the whole document is done. `--format` with no
value (or `auto`) takes the format from the input's extension. The line-by-line flags (TEXT arguments, --nbest,
--alignment, --attention-maps, --prefix-file, --constraints-file) do not apply to a document and are refused;
`--glossary` applies to each sentence. Protected spans (placeholders, URLs, numbers, code, `--protect` patterns) are
kept as written; `--retranslate` translates po and xliff entries already translated again.
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


def translate_file(args: argparse.Namespace, glossary: Glossary | None = None) -> int:
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
