"""README.md's commands and the docs' paths: every CPU command the README shows is run by a test.

A command is a line of a ```bash block (with its `\\` continuation lines) or a `$ ` line of a ```text block; a
```python block is one command. Each command is one of:
- labelled: its trailing comment starts with one of LABELS (it needs a GPU or the internet), and is not run here;
- covered elsewhere: a key of COVERED_ELSEWHERE, whose value names the test or CI step that runs it;
- run: by `test_every_cpu_command_in_the_readme_runs`, in the README's order (training first), inside a temporary
  folder laid out like a checkout whose configs/demo.yaml is the tiny config trained for a few updates, so that
  runs/demo/checkpoint_last.pt (and CKPT, which stands for it) is a tiny trained model.
A command that is none of these (an unlabelled command with no runner) fails the fast test
`test_every_readme_command_is_labelled_covered_or_runnable`, which `make test-fast` runs too. The running test needs
the dev extra (transformers and ctranslate2 for the export commands), as `make test` installs it.

Also here: every file path named in README.md, CONTRIBUTING.md and docs/*.md exists, and no doc or code file refers
to an issue-tracker number.
"""

from __future__ import annotations

import io
import re
import shlex
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest
import torch

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"

LABELS = ("GPU", "several GPUs", "needs the internet")  # a trailing comment starting with one: not run here
COVERED_ELSEWHERE = {  # command -> (the file that runs it, how)
    "make demo": ("tests/test_demo.py", "runs scripts/demo.py, what `make demo` runs after setup, on the tiny config"),
    "make test": (".ci/run", "runs `make test` on every CI build, from a clean clone"),
    'pip install -e ".[dev,plot]"': (".ci/run", "`make test` runs `make setup-dev`, which runs this pip install"),
    'pip install -e ".[serve]"': (
        ".ci/run",
        "the dev extra that `make test` installs holds the serve extra's packages",
    ),
    "transformer-serve --model es-en.pt --model en-es.pt --model en-de.pt": (
        "tests/test_serving_pairs.py",
        "starts the real server with three models (es-en, en-es, en-yy) and talks HTTP to it, pivots included",
    ),
    "transformer-translate --checkpoint CKPT --input report.docx --output report.en.docx": (
        "tests/test_documents_cli.py",
        "translates a Word file end to end (test_each_format_is_translated_end_to_end; without --format: the guess)",
    ),
    "transformer-distill --teacher runs/demo/averaged.pt --config configs/student.yaml --out runs/distill": (
        "tests/test_distillation.py",
        "runs every stage on a tiny teacher and student (test_every_stage_in_one_command_then_one_stage_on_its_own)",
    ),
    "torchrun --nproc_per_node 2 -m transformer distill --teacher runs/demo/averaged.pt --config "
    "configs/student.yaml --out runs/distill --stage translate --threads 1": (
        "tests/test_distillation.py",
        "starts two processes as torchrun does (test_two_processes_give_the_corpus_of_one)",
    ),
    "python scripts/benchmark_distill.py --work runs/distill-bench": (
        "tests/test_distill_benchmark.py",
        "runs the whole measurement on the tiny config for a few updates",
    ),
    'curl -s localhost:5000/translate -H \'Content-Type: application/json\' -d \'{"q": "Hola.", "source": "es", '
    '"target": "en"}\'': ("tests/test_serving.py", "sends this request (test_the_readme_curl_request)"),
}
PLACEHOLDERS = {"CKPT": "runs/demo/checkpoint_last.pt"}  # the README says what each stands for
SHELL_OPERATORS = {"&&", "||", ";", ">>", "<", "2>", "&"}  # tokens the small shell below does not run

# The tiny stand-in for configs/demo.yaml: the tiny config (a slice of the bundled corpus), 5 updates, a numbered
# checkpoint after each so that `transformer-average --last 5` finds five, the demo's beam of 4 (for --nbest 4), and
# a confidence calibration on 4 validation pairs (for --min-confidence auto).
DEMO_STAND_IN = f"""base: {ROOT / "configs" / "tiny.yaml"}
train: {{out_dir: runs/demo, max_steps: 5, save_every: 1, keep_last: 5, valid_every: 0, valid_bleu: false,
        confidence_lines: 4}}
decode: {{beam_size: 4}}
"""
SOURCES = ["Y dijo Dios: Sea la luz.", "En el principio era el Verbo.", "", "Jesús lloró."]
REFERENCES = ["And God said, Let there be light.", "In the beginning was the Word.", "", "Jesus wept."]
FILES = {  # inputs the README's commands name; out.en is also written by a translate command before it is read
    "input.es": SOURCES,
    "test.es": SOURCES,
    "test.en": REFERENCES,
    "out.en": REFERENCES[::-1],
    "base.en": REFERENCES[::-1],
    "new.en": REFERENCES,
    "ref1.en": REFERENCES,
    "ref2.en": [r.lower() for r in REFERENCES],
    "prefix.en": ["And God", "", "", ""],
    "terms.jsonl": ['["light"]', "[]", "[]", '["wept"]'],
    "glossary.tsv": ["# source<TAB>target, an optional <TAB>cased", "luz\tlight", "Dios\tGod\tcased"],
    "page.html": ["<p>Y dijo <b>Dios</b>: Sea la luz.</p>"],  # the --format examples' documents
    "notes.md": ["# En el principio", "", "Y dijo *Dios*: Sea la luz."],
    "talk.srt": [
        "1",
        "00:00:01,000 --> 00:00:02,000",
        "Y dijo Dios:",
        "",
        "2",
        "00:00:03,000 --> 00:00:04,000",
        "Sea.",
    ],
    "talk.vtt": ["WEBVTT", "", "00:01.000 --> 00:02.000", "Jesús lloró."],
    "messages.po": ["#, c-format", 'msgid "Abra %s con --force"', 'msgstr ""', "", 'msgid "Hecho"', 'msgstr "Done"'],
}


@dataclass(frozen=True)
class Command:
    text: str  # the command (a whole block for python), without its trailing comment
    comment: str  # its trailing comment, "" if none
    language: str  # "bash" (bash blocks and `$ ` lines of text blocks) or "python"


def split_comment(line: str) -> tuple[str, str]:
    """(command, comment): the comment starts at the first `#` outside quotes that follows a space."""
    quote = None
    for i, char in enumerate(line):
        if quote:
            quote = None if char == quote else quote
        elif char in "'\"":
            quote = char
        elif char == "#" and (i == 0 or line[i - 1].isspace()):
            return line[:i].strip(), line[i + 1 :].strip()
    return line.strip(), ""


def _shell_lines(lines: list[str], prompt: str) -> list[Command]:
    """The commands of a block's lines: those starting with `prompt` ("" = every line), `\\` continuations joined."""
    commands, pending = [], None
    for line in lines:
        if pending is not None:
            pending += " " + line.strip()
        elif line.startswith(prompt) and line.strip() and not line.lstrip().startswith("#"):
            pending = line[len(prompt) :].strip()
        else:
            continue
        if pending.endswith("\\"):
            pending = pending[:-1].rstrip()
            continue
        commands.append(Command(*split_comment(pending), "bash"))
        pending = None
    return commands


def commands_in(markdown: str) -> list[Command]:
    """Every command shown in the markdown's code blocks, in order."""
    commands = []
    for language, body in re.findall(r"(?ms)^```(\w*)\n(.*?)^```", markdown):
        lines = body.splitlines()
        if language in ("bash", "sh", "shell", "console"):
            commands += _shell_lines(lines, "$ " if language == "console" else "")
        elif language == "text":
            commands += _shell_lines(lines, "$ ")
        elif language == "python":
            commands.append(Command(body, "", "python"))
    return commands


def _program(tokens: list[str]):
    """The in-process entry point and its arguments for a command's tokens, or None."""
    from transformer.commands import cli

    if tokens[:3] == ["python", "-m", "transformer"]:
        return cli.main, tokens[3:]
    name = tokens[0].removeprefix("transformer-")
    entry = getattr(cli, f"{name}_main", None) if tokens[0].startswith("transformer-") else None
    return (entry, tokens[1:]) if entry else None


@dataclass
class Plan:
    """How the small shell runs one command: stdin text, the entry point and argv, and a file for stdout."""

    entry: object
    argv: list[str]
    stdin: str = ""
    stdout: str | None = None


def plan(command: Command) -> Plan:
    """`[cat F | printf FMT |] PROGRAM ARGS [> F]`, placeholders replaced; ValueError for anything else."""
    tokens = [PLACEHOLDERS.get(t, t) for t in shlex.split(command.text)]
    if SHELL_OPERATORS & set(tokens) or any("$(" in t or "`" in t for t in tokens) or tokens.count("|") > 1:
        raise ValueError("uses shell syntax the README test does not run")
    stdin, stdout = "", None
    if "|" in tokens:
        i = tokens.index("|")
        source, tokens = tokens[:i], tokens[i + 1 :]
        if len(source) != 2 or source[0] not in ("cat", "printf") or "%" in source[1]:
            raise ValueError("only `cat FILE |` and `printf 'TEXT' |` feed a command here")
        stdin = source[1].replace("\\n", "\n") if source[0] == "printf" else f"<file:{source[1]}>"
    if ">" in tokens:
        i = tokens.index(">")
        tokens, stdout = tokens[:i], tokens[i + 1]
    program = _program(tokens)
    if program is None:
        raise ValueError(f"no runner for `{tokens[0]}`")
    return Plan(*program, stdin=stdin, stdout=stdout)


def classify(command: Command) -> str:
    """'labelled', 'covered' or 'run'; ValueError (naming why) for a command that no test runs."""
    if command.comment.startswith(LABELS):
        return "labelled"
    if command.text in COVERED_ELSEWHERE:
        return "covered"
    if command.language == "bash":
        plan(command)  # raises if the small shell cannot run it
    return "run"


# ------------------------------------------------------------------------------------------------ fast checks


def test_every_readme_command_is_labelled_covered_or_runnable():
    commands = commands_in(README.read_text(encoding="utf-8"))
    problems = []
    for command in commands:
        try:
            classify(command)
        except ValueError as exc:
            problems.append(f"{command.text!r}: {exc}; label it ({', '.join(LABELS)}) or give it a runner")
    assert not problems, "\n".join(problems)
    kinds = [classify(c) for c in commands]
    assert kinds.count("run") >= 15 and "labelled" in kinds and "covered" in kinds  # the parser found the blocks


def test_an_unlabelled_command_without_a_runner_is_refused_and_a_label_excuses_it():
    markdown = "```bash\nsacrebleu ref.en -i hyp.en\nsacrebleu --list   # needs the internet: lists test sets\n```\n"
    first, second = commands_in(markdown)
    with pytest.raises(ValueError, match="no runner for `sacrebleu`"):
        classify(first)
    assert classify(second) == "labelled"
    for text in ("transformer-train --config c.yaml && rm -r runs", "transformer-evaluate --hyp h < x"):
        with pytest.raises(ValueError, match="shell syntax"):
            classify(Command(text, "", "bash"))


def test_the_parser_reads_continuations_prompts_comments_and_python_blocks():
    markdown = (
        "```bash\n# a comment line\ntransformer-train --config a.yaml \\\n    --set 'x.y=#1'   # GPU: big\n```\n"
        "```text\n$ printf 'a\\n' \\\n    | transformer-translate --checkpoint CKPT\noutput line\n```\n"
        "```python\nimport x\nx.y()\n```\n"
    )
    train, translate, python = commands_in(markdown)
    assert train == Command("transformer-train --config a.yaml --set 'x.y=#1'", "GPU: big", "bash")
    assert translate.text == "printf 'a\\n' | transformer-translate --checkpoint CKPT" and not translate.comment
    assert python == Command("import x\nx.y()\n", "", "python")
    run = plan(translate)
    assert run.stdin == "a\n" and run.argv == ["--checkpoint", "runs/demo/checkpoint_last.pt"]


def test_what_runs_elsewhere_is_in_the_readme_and_its_runner_exists():
    shown = {c.text for c in commands_in(README.read_text(encoding="utf-8"))}
    for command, (runner, _) in COVERED_ELSEWHERE.items():
        assert command in shown, f"{command!r} is no longer in README.md: remove it from COVERED_ELSEWHERE"
        assert (ROOT / runner).is_file(), runner


DOCS = [README, ROOT / "CONTRIBUTING.md", *sorted((ROOT / "docs").glob("*.md"))]
PATH = re.compile(r"(?<![\w/.-])((?:transformer|scripts|tests|configs)/[a-z0-9_/.-]*[a-z0-9_]\.(?:py|yaml)|\.ci/run)")
IN_PACKAGE = re.compile(r"`((?:model|data|training|decoding|commands|benchmarks)/[a-z0-9_]+\.py)`")


@pytest.mark.parametrize("doc", DOCS, ids=lambda p: p.name)
def test_paths_named_in_the_docs_exist(doc):
    """Every file path a doc names (transformer/..., scripts/..., tests/..., configs/...; the README's table names
    them relative to transformer/) is a file of the checkout."""
    text = doc.read_text(encoding="utf-8")
    named = set(PATH.findall(text)) | {f"transformer/{p}" for p in IN_PACKAGE.findall(text)}
    missing = sorted(p for p in named if not (ROOT / p).is_file())
    assert not missing, f"{doc.name} names files that do not exist: {missing}"


def test_no_issue_numbers_in_the_docs_or_the_code():
    """The docs and the code stand on their own: no references to issue-tracker numbers."""
    files = [*DOCS, ROOT / "Makefile", *ROOT.glob("configs/*.yaml"), *ROOT.glob("scripts/*.py")]
    files += [*ROOT.glob("transformer/**/*.py"), *ROOT.glob("tests/*.py"), ROOT / ".ci" / "run"]
    pattern = re.compile(r"\bissues?\s+#?\d+|\bissue\s+\(#?\d+", re.IGNORECASE)
    hits = [f"{p.relative_to(ROOT)}: {m.group(0)}" for p in files for m in pattern.finditer(p.read_text("utf-8"))]
    assert not hits, hits


# ------------------------------------------------------------------------------------------------ running them


def _checkout(folder: Path) -> None:
    (folder / "configs").mkdir()
    (folder / "configs" / "demo.yaml").write_text(DEMO_STAND_IN, encoding="utf-8")
    for name, lines in FILES.items():
        (folder / name).write_text("".join(line + "\n" for line in lines), encoding="utf-8")


def _run(command: Command) -> tuple[int, str]:
    """Run one bash command in this process, its stdin and stdout replaced: (exit code, its standard output)."""
    run = plan(command)
    stdin = Path(run.stdin[6:-1]).read_text(encoding="utf-8") if run.stdin.startswith("<file:") else run.stdin
    out = io.BytesIO()
    saved, threads = (sys.stdin, sys.stdout), torch.get_num_threads()
    sys.stdin = io.TextIOWrapper(io.BytesIO(stdin.encode("utf-8")), encoding="utf-8")
    sys.stdout = stdout = io.TextIOWrapper(out, encoding="utf-8", write_through=True)
    try:
        code = run.entry(run.argv)
    except SystemExit as exc:  # argparse's --help and --version
        code = exc.code or 0
    finally:
        stdout.flush()
        stdout.detach()  # keeps `out` open
        sys.stdin, sys.stdout = saved
        torch.set_num_threads(threads)
    text = out.getvalue().decode("utf-8")
    if run.stdout:
        Path(run.stdout).write_text(text, encoding="utf-8")
    return code, text


def _outputs(command: Command) -> list[str]:
    """The files a command says it writes: `--output F`, `--json F` and `> F` (not `-`)."""
    tokens = shlex.split(command.text)
    named = [tokens[i + 1] for i, t in enumerate(tokens[:-1]) if t in ("--output", "--json", ">")]
    return [n for n in named if n != "-"]


@pytest.mark.slow
def test_every_cpu_command_in_the_readme_runs(tmp_path, monkeypatch):
    """Each CPU command of the README exits 0 and writes what it names, in a checkout-like temporary folder where
    configs/demo.yaml is the tiny config (its 5 updates take seconds); python blocks run there too."""
    pytest.importorskip("transformers")  # the dev extra (make setup-dev): the export commands need it
    pytest.importorskip("ctranslate2")
    _checkout(tmp_path)
    monkeypatch.chdir(tmp_path)
    commands = [c for c in commands_in(README.read_text(encoding="utf-8")) if classify(c) == "run"]
    training = [c for c in commands if c.text.startswith(("transformer-train ", "python -m transformer train "))]
    ran = []
    for command in training + [c for c in commands if c not in training]:  # a checkpoint before it is read
        if command.language == "python":
            exec(compile(command.text, "README.md python block", "exec"), {})
        else:
            code, _ = _run(command)
            assert code == 0, f"README command failed with exit code {code}: {command.text}"
            for name in _outputs(command):
                assert Path(name).exists(), f"{command.text} did not write {name}"
        ran.append(command)
    assert len(ran) == len(commands)
    assert (tmp_path / "runs" / "demo" / "averaged.pt").is_file()
    lines = (tmp_path / "output.en").read_text(encoding="utf-8").splitlines()
    assert len(lines) == len(SOURCES) and lines[2] == ""  # one line out per line in; an empty line stays empty
