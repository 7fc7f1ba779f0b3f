"""The glossary tools (transformer/benchmarks/glossary_terms.py, glossary.py): the term pairs found on a parallel set
whose dictionary is known, the shares of terms kept worked by hand, and scripts/build_glossary.py then
scripts/benchmark_glossary.py run end to end on the tiny checkpoint, printing JSON."""

from __future__ import annotations

import json
import os
import random
import subprocess
import sys
from pathlib import Path

import pytest
import tiny_checkpoint

from transformer.benchmarks.glossary import term_shares
from transformer.benchmarks.glossary_terms import build_terms, glossary_text
from transformer.decoding.glossary import Glossary, Term

ROOT = Path(__file__).resolve().parents[1]
DICTIONARY = {"perro": "dog", "gato": "cat", "casa": "house", "pan": "bread", "Juan": "John", "María": "Mary"}


def parallel(n: int, seed: int) -> tuple[list[str], list[str]]:
    """Sentences of 2-3 dictionary words between function words found in every line ("el"/"the", "y"/"and")."""
    rng = random.Random(seed)
    sources, targets = [], []
    for _ in range(n):
        words = rng.sample(sorted(DICTIONARY), rng.randint(2, 3))
        sources.append("El " + " y ".join(words) + ".")
        targets.append("The " + " and ".join(DICTIONARY[w] for w in words) + ".")
    return sources, targets


def test_the_pairs_of_a_known_dictionary_are_found_and_names_are_cased():
    sources, targets = parallel(80, seed=0)
    terms = build_terms(sources, targets, skip=2)  # "el", "y" / "the", "and": in every line (one letter: never)
    assert sorted(terms) == sorted((s, t, s[0].isupper()) for s, t in DICTIONARY.items())
    with_function_words = build_terms(sources, targets, skip=0)
    assert ("El", "The", False) in with_function_words and len(with_function_words) > len(terms)


def test_the_glossary_file_round_trips(tmp_path):
    terms = [("Juan", "John", True), ("perro", "dog", False)]
    (tmp_path / "g.tsv").write_text(glossary_text(terms, ["built by hand"]), encoding="utf-8")
    assert Glossary.load(tmp_path / "g.tsv").terms == (Term("Juan", "John", True), Term("perro", "dog"))


def test_term_shares_worked_by_hand():
    texts = ["The Dog ran.", "a doghouse", "the dog and the cat"]
    wanted = [["dog"], ["dog"], ["dog", "cat"]]
    assert term_shares(texts, wanted) == {"exact": 0.5, "any_case": 0.75}  # 2 and 3 of 4; "doghouse" is no "dog"
    assert term_shares(texts, [[], [], []]) == {"exact": None, "any_case": None}


def script(name: str, *args, cwd: Path) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
    env["OMP_NUM_THREADS"] = "1"
    command = [sys.executable, str(ROOT / "scripts" / name), *map(str, args)]
    return subprocess.run(command, capture_output=True, text=True, cwd=cwd, env=env, timeout=300)


@pytest.mark.slow
def test_the_scripts_build_a_glossary_and_measure_it_on_the_tiny_checkpoint(tmp_path):
    tiny = tiny_checkpoint.build(tmp_path)
    files = ["--src", tiny["src"], "--ref", tiny["ref"]]
    low = ["--min-count", 2, "--min-dice", 0.4, "--skip", 3]  # the tiny set: 12 unrelated random lines, low bars
    built = script("build_glossary.py", *files, "--output", tmp_path / "g.tsv", *low, cwd=tmp_path)
    assert built.returncode == 0, built.stderr
    summary = json.loads(built.stdout)
    assert summary["terms"] == len(Glossary.load(tmp_path / "g.tsv")) > 0 and summary["lines"] == 12
    model = ["--checkpoint", tiny["checkpoint"], "--glossary", tmp_path / "g.tsv"]
    measured = script(
        "benchmark_glossary.py", *model, *files, "--rounds", 1, "--json", tmp_path / "r.json", cwd=tmp_path
    )
    assert measured.returncode == 0, measured.stderr
    result = json.loads(measured.stdout)
    assert result == json.loads((tmp_path / "r.json").read_text(encoding="utf-8"))
    assert result["kind"] == "glossary" and result["lines"] == 12 and 0 < result["lines_with_terms"] < 12
    unchanged = result["lines_without_terms"]  # a line without a term is searched as without the glossary
    assert unchanged["outputs_changed"] == 0 and unchanged["with"] == unchanged["without"]
    assert unchanged["with"]["lines"] == 12 - result["lines_with_terms"]
    shares = result["terms_in_output"]
    assert shares["with"]["any_case"] >= shares["without"]["any_case"] and result["time_ratio"] > 0
    assert set(result["all_lines"]["with"]) == {"lines", "chrf", "bleu"}


def test_the_scripts_refuse_bad_input_in_one_line(tmp_path):
    for name, args, message in [
        ("build_glossary.py", ["--src", tmp_path / "a", "--output", tmp_path / "g.tsv"], "error: give the test set"),
        ("benchmark_glossary.py", ["--checkpoint", "x.pt", "--glossary", tmp_path / "no.tsv"], "error: glossary file"),
    ]:
        proc = script(name, *args, cwd=tmp_path)
        lines = proc.stderr.strip().splitlines()
        assert proc.returncode == 2 and len(lines) == 1 and lines[0].startswith(message), proc.stderr
