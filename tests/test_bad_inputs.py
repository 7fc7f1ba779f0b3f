"""A catalogue of bad inputs and faults over eight commands (prepare, train, translate, evaluate, average, distill,
calibrate, keys).

Each case either fails as the project promises (exit code 2, one line `error: ...` naming the problem, no
traceback) or gives the correct output; in both, nothing is lost: every file that existed before is unchanged,
and no temporary file is left behind. The commands run in-process through their main functions (fast). The cases
are listed in tests/bad_inputs_training.py (prepare, train, average, calibrate) and tests/bad_inputs_decoding.py
(translate, evaluate, keys), their shared inputs and setups in tests/bad_inputs.py; tests/test_real_faults.py
checks real signals, a closed standard input, read-only folders and long inputs.
"""

from __future__ import annotations

import hashlib
import re
from pathlib import Path

import pytest
from bad_inputs import MAINS, Case
from bad_inputs_decoding import EVALUATE, KEYS, TRANSLATE
from bad_inputs_training import AVERAGE, CALIBRATE, DISTILL, PREPARE, TRAIN

pytestmark = pytest.mark.filterwarnings("ignore:Detected pickle protocol")  # the crafted pickle is a plain one
CASES = PREPARE + TRAIN + TRANSLATE + EVALUATE + AVERAGE + DISTILL + CALIBRATE + KEYS
# Not an error line: how transformer-translate without --format takes its --input (commands/documents.py), said
# once the first line is translated, so before an error found further down the file (a bad byte on line 3).
MODE_LINE = re.compile(r"translating \S+ (line by line|as one \w+ document), .*")


def _snapshot(*folders: Path) -> dict[Path, str]:
    files = [p for folder in folders for p in folder.rglob("*") if p.is_file() and "cache" not in p.parts]
    return {p: _digest(p) for p in files if p.name != "train.lock"}  # the stale-lock case replaces one on purpose


def _digest(p: Path) -> str:
    return hashlib.sha256(p.read_bytes()).hexdigest()


def test_the_catalogue_is_large_enough():
    assert len(CASES) >= 60 and {c.command for c in CASES} == set(MAINS)
    assert len({c.id for c in CASES}) == len(CASES)


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_bad_input(case: Case, world, tmp_path, capsys, monkeypatch):
    if case.setup:
        case.setup(tmp_path, monkeypatch)
    argv = [a.format(tmp=tmp_path, **world) for a in case.argv]
    before = _snapshot(Path(world["w"]), tmp_path)
    try:
        code = MAINS[case.command](argv)
    except SystemExit as exc:  # argparse's own errors (usage line, then `prog: error: ...`)
        code = exc.code
    out, err = capsys.readouterr()
    assert "Traceback" not in err
    if case.check:
        assert case.check(tmp_path, out, err), (out, err)
    if case.error is None:
        assert code == 0, err
    else:
        errors = [line for line in err.splitlines() if "error: " in line]
        assert code == 2 and len(errors) == 1 and case.error in errors[0], err
        assert not [
            line
            for line in err.splitlines()
            if line.strip()
            and not line.startswith(("error: ", "usage"))
            and "error: " not in line
            and not line.startswith(" ")
            and not MODE_LINE.fullmatch(line)
        ], err
    after = _snapshot(Path(world["w"]), tmp_path)
    changed = [str(p) for p, digest in before.items() if after.get(p) != digest]
    assert not changed, f"changed or removed: {changed}"
    assert not [p for p in after if p.name.endswith(".tmp")], "a temporary file was left behind"
    assert not (Path(world["w"]) / "PWNED").exists()
