"""The built wheel, installed into a fresh virtual environment, works from another directory (no network).

The fresh environment gets the project's own dependencies through a .pth file pointing at this interpreter's
site-packages (so nothing is downloaded), and the wheel itself with `pip install --no-deps`.
"""

from __future__ import annotations

import os
import site
import subprocess
import sys
import sysconfig
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def _run(command: list[str], cwd: Path, **kwargs) -> subprocess.CompletedProcess:
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": "", "PIP_NO_INDEX": "1", "HF_HUB_OFFLINE": "1"}
    result = subprocess.run(command, cwd=cwd, env=env, capture_output=True, text=True, timeout=600, **kwargs)
    assert result.returncode == 0, f"{command}\n{result.stdout[-2000:]}\n{result.stderr[-3000:]}"
    return result


@pytest.mark.slow
def test_wheel_installs_and_runs_from_another_directory(tmp_path):
    wheels = tmp_path / "wheels"
    _run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q", "-w", str(wheels), str(ROOT)],
        cwd=tmp_path,
    )
    wheel = next(wheels.glob("transformer-*.whl"))
    names = zipfile.ZipFile(wheel).namelist()
    assert "transformer/bundled/configs/demo.yaml" in names and any(n.endswith("/licenses/LICENSE") for n in names)
    assert "transformer/bundled/data/bible-es-en/train.tsv.xz" in names and wheel.stat().st_size < 3_000_000
    assert "transformer/serving/page.html" in names  # transformer-serve's page travels with the package
    packages = {path.parent.relative_to(ROOT).as_posix() for path in (ROOT / "transformer").rglob("__init__.py")}
    assert {f"{package}/__init__.py" for package in packages} <= set(names)  # pyproject.toml lists each package

    venv = tmp_path / "venv"
    _run([sys.executable, "-m", "venv", "--without-pip", str(venv)], cwd=tmp_path)
    python = venv / "bin" / "python"
    purelib = _run([str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"], cwd=tmp_path)
    ours = [sysconfig.get_paths()["purelib"], *site.getsitepackages()]
    (Path(purelib.stdout.strip()) / "project_deps.pth").write_text("\n".join(dict.fromkeys(ours)) + "\n")
    _run([sys.executable, "-m", "pip", "--python", str(python), "install", "--no-deps", "-q", str(wheel)], cwd=tmp_path)

    work = tmp_path / "elsewhere"
    work.mkdir()
    where = _run([str(python), "-c", "import transformer; print(transformer.__file__)"], cwd=work).stdout
    assert where.startswith(str(venv)), where  # the installed copy, not the checkout
    config = str(ROOT / "configs" / "tiny.yaml")  # by absolute path: its data paths resolve against configs/
    bin_ = venv / "bin"
    _run([str(bin_ / "transformer-prepare"), "--config", config], cwd=work)
    _run(
        [
            str(bin_ / "transformer-train"),
            "--config",
            config,
            "--no-progress",
            "--set",
            "train.max_steps=3",
            "--set",
            "train.valid_every=0",
            "--set",
            "train.valid_bleu=false",
        ],
        cwd=work,
    )
    assert (work / "runs" / "tiny" / "checkpoint_last.pt").is_file() and (work / "cache").is_dir()  # outputs: cwd
    out = _run(
        [str(bin_ / "transformer-translate"), "--checkpoint", "runs/tiny/checkpoint_last.pt", "Hola.", "Sí."], cwd=work
    ).stdout
    assert len(out.splitlines()) == 2
    shipped = _run([str(python), "-m", "transformer", "train", "--config", "tiny", "--print-config"], cwd=work).stdout
    assert f"{venv}" in shipped and "bundled/data/bible-es-en/dev.tsv.xz" in shipped  # the packaged corpus
    assert _run([str(python), "-m", "transformer", "--version"], cwd=work).stdout.startswith("transformer ")
