"""transformer-translate --format and Translator.translate_document end to end on a tiny checkpoint: every format
written with its structure kept, long paragraphs cut to fit the model (never truncated), bad files refused with one
line and exit 2, nothing written."""

from __future__ import annotations

import io
import logging
import re
import subprocess
import sys
from collections import Counter

import pytest
import tiny_checkpoint
from document_samples import EXTENSIONS, SAMPLES, sample
from hostile_documents import docx_bomb, nested_markdown

pytest.importorskip("sentencex")
pytest.importorskip("docx")

from transformer.commands.cli import translate_main  # noqa: E402
from transformer.documents import FORMATS  # noqa: E402


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory) -> str:
    return str(tiny_checkpoint.build(tmp_path_factory.mktemp("documents"))["checkpoint"])


def _write(path, data) -> None:
    path.write_bytes(data if isinstance(data, bytes) else data.encode("utf-8"))


def _tags(text: str) -> Counter:
    return Counter(re.findall(r"<[^>]*>", text))


def _structure(format: str, text: str):
    """What translation must not change: tags, cue times, code blocks, paragraph count."""
    if format in ("srt", "vtt"):
        return [line for line in text.split("\n") if "-->" in line or line.strip().isdigit()]
    if format == "html":
        return _tags(text)
    if format == "markdown":
        return [line for line in text.split("\n") if line.startswith(("```", "    ", "|---", "[ref]:"))]
    return len(re.split(r"\n\s*\n", text))


@pytest.mark.slow
@pytest.mark.parametrize("format", sorted(FORMATS))
def test_each_format_is_translated_end_to_end(format, checkpoint, tmp_path):
    source, out = tmp_path / f"in.{EXTENSIONS[format]}", tmp_path / f"out.{EXTENSIONS[format]}"
    _write(source, sample(format))
    argv = ["--checkpoint", checkpoint, "--format", "--input", str(source), "--output", str(out), "--quiet"]
    assert translate_main(argv) == 0
    if format == "docx":
        import docx

        document = docx.Document(io.BytesIO(out.read_bytes()))
        assert len(document.paragraphs) == 1 and document.tables[0].cell(0, 0).text.strip()
        assert any(run.bold for run in document.paragraphs[0].runs)
        return
    text = out.read_text(encoding="utf-8")
    assert text != SAMPLES[format]
    assert _structure(format, text) == _structure(format, SAMPLES[format])


@pytest.mark.slow
def test_a_paragraph_longer_than_the_model_is_cut_to_fit_not_truncated(checkpoint, tmp_path, caplog):
    words = tiny_checkpoint.sentences(30, seed=3)
    source, out = tmp_path / "long.txt", tmp_path / "long.out.txt"
    source.write_text(" ".join(words) + "\n\n" + "small cat.\n", encoding="utf-8")  # 100+ words, no full stop
    with caplog.at_level(logging.WARNING):
        assert (
            translate_main(
                [
                    "--checkpoint",
                    checkpoint,
                    "--format",
                    "text",
                    "--input",
                    str(source),
                    "--output",
                    str(out),
                    "--quiet",
                ]
            )
            == 0
        )
    assert "truncated" not in caplog.text
    paragraphs = out.read_text(encoding="utf-8").split("\n\n")
    assert len(paragraphs) == 2 and paragraphs[1].endswith("\n")


@pytest.mark.slow
@pytest.mark.parametrize(
    "name, data, flags, expected",
    [
        ("bad.html", b"<p>\xff</p>", [], "bad.html line 1 is not valid UTF-8"),
        ("bad.html", b"<p><b><i>x</b></i></p>", [], "</b> closes <b> while <i> inside it is still open"),
        ("bad.docx", b"PK\x03\x04 broken", [], "bad.docx: not a Word .docx file"),
        ("bad.srt", b"1\nno times here\nhi\n", [], "bad.srt: line 1: not an SRT cue"),
        ("doc.pdf", b"%PDF-1.4", [], "cannot tell the format of"),
        ("doc.html", b"<p>hi</p>", ["--nbest", "2"], "--nbest apply to lines, not documents"),
        ("doc.html", b"<p>hi</p>", ["--alignment"], "--alignment apply to lines, not documents"),
        ("deep.md", nested_markdown(10_000).encode(), [], "deep.md: line 1: quotes and lists nest more than 100"),
    ],
)
def test_a_bad_document_exits_2_with_one_line_and_writes_nothing(
    checkpoint, tmp_path, capsys, name, data, flags, expected
):
    source, out = tmp_path / name, tmp_path / "out.file"
    source.write_bytes(data)
    out.write_text("previous contents", encoding="utf-8")
    argv = ["--checkpoint", checkpoint, "--format", "--input", str(source), "--output", str(out), *flags]
    assert translate_main(argv) == 2
    error = capsys.readouterr().err.strip()
    assert error.startswith("error: ") and expected in error and "\n" not in error and "Traceback" not in error
    assert out.read_text(encoding="utf-8") == "previous contents"
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted([name, "out.file"])  # no temporary file left


# Every extension of a document format (documents.FORMATS, text's aside), with its format: guessed without --format.
DOCUMENT_EXTENSIONS = [(ext, name) for name, (exts, _) in FORMATS.items() if name != "text" for ext in exts]


def _guess(name: str, *flags: str) -> tuple[str | None, str | None]:
    """(the mode guess_mode takes for `--input name` with `flags`, the line that says so)."""
    from transformer.commands.cli import translate_args
    from transformer.commands.documents import guess_mode
    from transformer.commands.parsers import build_parser

    return guess_mode(
        build_parser("translate", translate_args).parse_args(["--checkpoint", "c", "--input", name, *flags])
    )


def test_without_format_a_documents_extension_is_that_document_and_said_in_one_line():
    assert {ext for ext, _ in DOCUMENT_EXTENSIONS} >= {
        ".html",
        ".htm",
        ".xhtml",
        ".md",
        ".markdown",
        ".srt",
        ".vtt",
        ".docx",
    }
    for ext, format in DOCUMENT_EXTENSIONS + [(".HTML", "html"), (".Docx", "docx")]:
        mode, line = _guess(f"page{ext}")
        assert (
            mode == format and "\n" not in line and line.startswith(f"translating page{ext} as one {format} document")
        )
        assert "standard input" in line  # how to have it line by line


@pytest.mark.parametrize("name", ["notes.txt", "notes.text", "corpus.es", "README", "archive.tar.gz", "page.html.bak"])
def test_without_format_other_files_stay_line_by_line_and_say_so(name):
    mode, line = _guess(name)
    assert mode is None and "\n" not in line and f"{name} line by line" in line and "--format" in line


@pytest.mark.parametrize("flags", [["--nbest", "2"], ["--alignment"], ["--confidence"], ["--prefix-file", "p.txt"]])
def test_a_flag_that_works_on_lines_keeps_a_document_line_by_line(flags):
    mode, line = _guess("page.html", *flags)
    assert mode is None and "line by line" in line and f"{flags[0]} work on lines" in line


def test_standard_input_and_a_given_format_are_taken_as_they_are():
    assert _guess("-") == (None, None)
    assert _guess("page.html", "--format", "text") == ("text", None)


@pytest.mark.slow
@pytest.mark.parametrize("ext, format", DOCUMENT_EXTENSIONS)
def test_without_format_a_document_is_translated_as_with_it(checkpoint, tmp_path, capsys, ext, format):
    source = tmp_path / f"in{ext}"
    _write(source, sample(format))
    outputs = []
    for flags in ([], ["--format", format]):
        out = tmp_path / f"out{len(outputs)}{ext}"
        argv = ["--checkpoint", checkpoint, "--input", str(source), "--output", str(out), "--quiet", *flags]
        assert translate_main(argv) == 0
        outputs.append(out.read_bytes())
    assert outputs[0] == outputs[1] != source.read_bytes()
    [said] = [line for line in capsys.readouterr().err.splitlines() if line.startswith("translating")]
    assert f"as one {format} document" in said  # once, for the run without --format


@pytest.mark.slow
def test_without_format_a_text_file_is_line_by_line_as_before(checkpoint, tmp_path, capsys):
    source, out = tmp_path / "lines.txt", tmp_path / "lines.out"
    source.write_text("<p>the cat</p>\n\nsmall dog\n", encoding="utf-8")
    assert translate_main(["--checkpoint", checkpoint, "--input", str(source), "--output", str(out), "--quiet"]) == 0
    assert len(out.read_text(encoding="utf-8").split("\n")) == 4  # one line out per line in
    assert capsys.readouterr().err.count("lines.txt line by line") == 1


@pytest.mark.slow
def test_the_python_api_translates_a_document_and_returns_its_type(checkpoint):
    from transformer import Translator

    translator = Translator.from_checkpoint(checkpoint)
    html = "<p>the cat <b>sat</b> on the mat.</p>"
    out = translator.translate_document(html, "html")
    assert isinstance(out, str) and _tags(out) == _tags(html)
    assert isinstance(translator.translate_document(html.encode(), "html"), bytes)
    assert isinstance(translator.translate_document(sample("docx"), "docx"), bytes)


# The command in a child process that reports its peak resident set size (KiB) on its last line of stderr.
PEAK = (
    "import resource, sys\nfrom transformer.commands.cli import translate_main\ncode = translate_main(sys.argv[1:])\n"
    "print(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss, file=sys.stderr)\nsys.exit(code)"
)


@pytest.mark.slow
def test_zip_bombs_are_refused_in_one_line_with_the_memory_of_a_broken_file(checkpoint, tmp_path):
    """A 4.8 MB .docx holding 1.5 GiB of paragraphs (it declares them), and one holding 1 GiB behind a header that
    declares 100 kB: each refused in one line (exit 2), the process's peak memory within 64 MiB of refusing a
    broken file (the file itself and a chunk at a time), not the gigabytes it would unpack to."""
    files = {"broken.docx": b"PK\x03\x04 broken", "bomb.docx": docx_bomb(1536), "liar.docx": docx_bomb(1024, 100_000)}
    runs = {}
    for name, data in files.items():
        (tmp_path / name).write_bytes(data)
        argv = ["--checkpoint", checkpoint, "--input", str(tmp_path / name), "--output", str(tmp_path / "out.docx")]
        child = subprocess.run([sys.executable, "-c", PEAK, *argv], capture_output=True, text=True, timeout=600)
        *lines, peak = child.stderr.splitlines()
        assert child.returncode == 2 and len(lines) == 1, child.stderr  # refused before the mode line is said
        runs[name] = lines[0], int(peak)
    assert runs["bomb.docx"][0].startswith("error: ") and "declares 1611431373 bytes unpacked" in runs["bomb.docx"][0]
    assert "unpacks to more than the 100000 bytes it declares" in runs["liar.docx"][0]
    baseline = runs["broken.docx"][1]
    assert runs["bomb.docx"][1] < baseline + 64 * 1024 and runs["liar.docx"][1] < baseline + 64 * 1024
    assert not (tmp_path / "out.docx").exists()
