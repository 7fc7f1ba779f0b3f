"""A training recipe run to its end in pieces, then checkpoint averaging, test scores and a results file.

    run_recipe("configs/bible_es_en_paper.yaml", piece_seconds=480)   # what scripts/run_recipe.py does

Training runs until the recipe itself stops (early stopping on patience, `max_steps`, `max_epochs` or the
recipe's `max_time`), in pieces of at most `piece_seconds` of training (and/or `piece_updates` updates), each
piece resuming exactly from the last one's `checkpoint_last.pt` (the trainer's `--resume`). With `max_pieces` the
call returns after that many pieces and the same call later continues: that is how a run fits machines that allow
ten minutes per command. Progress is kept in `<out_dir>/recipe.json`.

When training has ended: the last `average_last` checkpoints on the save schedule are averaged (the paper's
section 6.1), the average translates the config's test split with its decoding settings (beam 4 in the recipes,
at `decode.precision` as transformer-evaluate decodes, not at the training's), and sacreBLEU BLEU and chrF with
their signatures go to `<results_dir>/<name>.json` with `kind: "bleu"`.
"""

from __future__ import annotations

import datetime
import json
import logging
import math
import os
from pathlib import Path
from typing import Any

from transformer.config import Config, load_config, parse_duration
from transformer.devices import device_name
from transformer.errors import UserError

log = logging.getLogger(__name__)

STATE_FILE = "recipe.json"
ENDED = ("patience", "max_epochs")  # trainer stop reasons that end a recipe whatever the piece limits


def _read_state(out_dir: Path, config: Config) -> dict[str, Any]:
    """The recipe's progress; refuses a run directory it did not start or one trained with another config."""
    path = out_dir / STATE_FILE
    if not path.is_file():
        if (out_dir / "checkpoint_last.pt").exists():
            raise UserError(
                f"{out_dir} holds a checkpoint that run_recipe did not start; remove the folder or set another "
                "train.out_dir"
            )
        return {"config": config.to_dict(), "pieces": [], "step": 0, "elapsed": 0.0, "done": False}
    state = json.loads(path.read_text(encoding="utf-8"))
    if state["config"] != config.to_dict():
        changed = [f"{s}.{k}" for s, v in config.to_dict().items() for k in v if state["config"][s].get(k) != v[k]]
        raise UserError(
            f"{out_dir} was trained with other settings ({', '.join(changed)} differ); use the same config and "
            "--set values to continue, or another train.out_dir to start again"
        )
    return state


def _write_state(out_dir: Path, state: dict[str, Any]) -> None:
    out_dir.mkdir(parents=True, exist_ok=True)
    tmp = out_dir / f".{STATE_FILE}.tmp"
    tmp.write_text(json.dumps(state, indent=2) + "\n", encoding="utf-8")
    os.replace(tmp, out_dir / STATE_FILE)


def piece_limits(
    config: Config, *, step: int, elapsed: float, piece_seconds: float, piece_updates: int
) -> tuple[int, float]:
    """(max_steps, max_time in seconds) for the next piece: the recipe's own limits, or the piece's if sooner.

    The trainer counts both cumulatively over resumed runs, so the piece's limits are added to where it stands.
    """
    train = config.train
    recipe_steps = train.max_steps or math.inf
    recipe_time = parse_duration(train.max_time) if train.max_time else math.inf
    steps = min(recipe_steps, step + piece_updates if piece_updates else math.inf)
    seconds = min(recipe_time, elapsed + piece_seconds if piece_seconds else math.inf)
    return (0 if steps == math.inf else int(steps)), seconds


def recipe_ended(config: Config, result: dict[str, Any]) -> bool:
    """Did the trainer stop because the recipe is over (not because the piece was)?"""
    train = config.train
    if result["reason"] in ENDED:
        return True
    if result["reason"] == "max_steps":
        return bool(train.max_steps) and result["step"] >= train.max_steps
    if result["reason"] == "max_time":
        return bool(train.max_time) and result["elapsed"] >= parse_duration(train.max_time)
    return False  # a signal: not over


def train_piece(
    config: Config, state: dict[str, Any], *, piece_seconds: float, piece_updates: int, progress: bool
) -> dict[str, Any]:
    """One piece: resume (unless first), train to the piece's limits, drop an off-schedule last checkpoint."""
    from transformer.training.trainer import Trainer

    max_steps, max_time = piece_limits(
        config, step=state["step"], elapsed=state["elapsed"], piece_seconds=piece_seconds, piece_updates=piece_updates
    )
    piece = config.replace("train", max_steps=max_steps, max_time=None if max_time == math.inf else f"{max_time}s")
    log.info(
        "recipe piece %d from update %d (to update %s, %.1f min)",
        len(state["pieces"]) + 1,
        state["step"],
        max_steps or "any",
        (max_time - state["elapsed"]) / 60,
    )
    result = Trainer(piece, resume=bool(state["pieces"]), progress=progress).run(final_validation=False)
    done = recipe_ended(config, result)
    save_every, out_dir = config.train.save_every, Path(config.train.out_dir)
    if not done and save_every and result["step"] % save_every:
        # checkpoint_last.pt is a hard link to it, so the next piece still resumes from it; it would otherwise
        # count among the last checkpoints averaged, off the save schedule.
        (out_dir / f"checkpoint_{result['step']}.pt").unlink(missing_ok=True)
    return {**result, "done": done, "piece_start_step": state["step"]}


def checkpoints_to_average(out_dir: Path, *, save_every: int, last: int) -> list[Path]:
    """The last `last` numbered checkpoints on the save schedule (every `save_every` updates), plus the final one."""
    found = sorted(out_dir.glob("checkpoint_[0-9]*.pt"), key=lambda p: int(p.stem.split("_")[1]))
    if not found:
        raise UserError(f"no numbered checkpoints (checkpoint_<step>.pt) in {out_dir} to average")
    final = found[-1]
    on_schedule = [p for p in found[:-1] if not save_every or int(p.stem.split("_")[1]) % save_every == 0]
    return (on_schedule + [final])[-last:]


def score_average(config: Config, out_dir: Path, paths: list[Path]) -> tuple[dict[str, Any], int]:
    """Average `paths` into averaged.pt (its confidence calibrated on the validation split: calibration.py),
    translate the test split with it at `decode.precision` (precision.py's rule, as transformer-evaluate decodes;
    the training precision plays no part); (scores, test sentences)."""
    from transformer.checkpoint import average_checkpoints, build_model, save_checkpoint
    from transformer.data.corpus import load_pairs
    from transformer.decoding.streaming import StreamingEngine
    from transformer.devices import pick_device
    from transformer.evaluation import corpus_scores
    from transformer.training.calibration import calibrate_state

    if config.data.test is None:
        raise UserError("the recipe's config has no data.test split to score")
    averaged = average_checkpoints([str(p) for p in paths])
    device = pick_device()
    if config.train.confidence_lines and config.data.valid is not None:  # the average's own (calibration.py)
        averaged = calibrate_state(averaged, config, lines=config.train.confidence_lines, device=device)
    save_checkpoint(averaged, out_dir / "averaged.pt")
    model, tokenizer, _ = build_model(averaged, device)
    sources, references = load_pairs(config.data.test, config.data)
    translator = StreamingEngine(model, tokenizer, config.decode, device=device)  # resolves config.decode.precision
    hypotheses = translator.translate_texts(sources)
    (out_dir / "averaged.test.hyp").write_text("\n".join(hypotheses) + "\n", encoding="utf-8")
    return corpus_scores(hypotheses, references), len(sources)


def train_pieces(
    config: Config, *, piece_seconds: float, piece_updates: int, max_pieces: int, progress: bool
) -> dict[str, Any]:
    """Pieces until the recipe ends, `max_pieces` have run (0 = no limit) or a signal stops one; the state, saved
    to `<out_dir>/recipe.json` after each piece."""
    out_dir = Path(config.train.out_dir)
    state = _read_state(out_dir, config)
    ran = 0
    while not state["done"] and (not max_pieces or ran < max_pieces):
        result = train_piece(config, state, piece_seconds=piece_seconds, piece_updates=piece_updates, progress=progress)
        state["pieces"].append({k: result[k] for k in ("piece_start_step", "step", "elapsed", "reason")})
        state.update(step=result["step"], elapsed=result["elapsed"], done=result["done"], best=result["best"])
        _write_state(out_dir, state)
        ran += 1
        if result["reason"] in ("SIGINT", "SIGTERM"):
            break
    return state


def _training_summary(state: dict[str, Any]) -> dict[str, Any]:
    """What the results file says of the training: updates, minutes, why it stopped, pieces, best validation."""
    return {
        "updates": state["step"],
        "train_minutes": round(state["elapsed"] / 60, 2),
        "stop_reason": state["pieces"][-1]["reason"],
        "pieces": len(state["pieces"]),
        "best_valid": state.get("best"),
    }


def _test_scores(scores: dict[str, Any]) -> dict[str, Any]:
    """What the results file says of the test scores: BLEU and chrF (2 decimals), their signatures, BLEU's detail."""
    return {
        "test_bleu": round(scores["bleu"], 2),
        "test_chrf": round(scores["chrf"], 2),
        "bleu_signature": scores["bleu_signature"],
        "chrf_signature": scores["chrf_signature"],
        "bleu_detail": scores["bleu_detail"],
    }


def _write_results(record: dict[str, Any], results_dir: Path) -> Path:
    """`<results_dir>/<name>.json`, the folder made if need be."""
    results = results_dir / f"{record['name']}.json"
    results.parent.mkdir(parents=True, exist_ok=True)
    results.write_text(json.dumps(record, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
    return results


def _recipe_config(config_path: str, overrides: list[str] | tuple[str, ...], average_last: int) -> Config:
    """The recipe's config with room for `average_last` checkpoints kept; a decode precision this machine cannot
    run (fp16 without CUDA) is refused now, not after hours of training."""
    from transformer.devices import pick_device
    from transformer.precision import resolve_precision

    config = load_config(config_path, overrides)
    resolve_precision(config.decode.precision, pick_device(), setting="decode.precision")
    if config.train.keep_last <= average_last:  # a piece's off-schedule checkpoint takes one slot for a while
        config = config.replace("train", keep_last=average_last + 1)
    return config


def run_recipe(
    config_path: str,
    overrides: list[str] | tuple[str, ...] = (),
    *,
    name: str | None = None,
    piece_seconds: float = 480.0,
    piece_updates: int = 0,
    max_pieces: int = 0,
    average_last: int = 5,
    results_dir: str | Path = "docs/results",
    command: str = "",
    progress: bool = True,
) -> dict[str, Any] | None:
    """Train in pieces until the recipe ends, then average, score and write the results file (returned).

    Returns None when `max_pieces` pieces ran and training is not over: call again with the same arguments.
    """
    config = _recipe_config(config_path, overrides, average_last)
    pieces = dict(piece_seconds=piece_seconds, piece_updates=piece_updates, max_pieces=max_pieces, progress=progress)
    state = train_pieces(config, **pieces)
    if not state["done"]:
        log.info(
            "recipe not finished (update %d, %.1f min): run the same command again to continue",
            state["step"],
            state["elapsed"] / 60,
        )
        return None
    out_dir = Path(config.train.out_dir)
    paths = checkpoints_to_average(out_dir, save_every=config.train.save_every, last=average_last)
    scores, sentences = score_average(config, out_dir, paths)
    record = {
        "kind": "bleu",
        "name": name or Path(config_path).stem,
        "device": device_name(),
        "date": datetime.datetime.now(datetime.timezone.utc).date().isoformat(),
        "config": str(config_path),
        "overrides": list(overrides),
        "command": command,
        **_training_summary(state),
        "averaged": [p.name for p in paths],
        "test_sentences": sentences,
        "decode": config.to_dict()["decode"],
        **_test_scores(scores),
    }
    results = _write_results(record, Path(results_dir))
    log.info(
        "test BLEU %.2f, chrF %.2f (%s); written to %s",
        scores["bleu"],
        scores["chrf"],
        scores["bleu_signature"],
        results,
    )
    return record
