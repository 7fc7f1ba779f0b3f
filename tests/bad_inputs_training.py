"""The bad-input catalogue's cases for transformer-prepare, -train, -average and -distill, which
tests/test_bad_inputs.py runs: config files and settings, data files, run directories and their locks, checkpoints
to resume from, start from or average, running out of GPU memory mid-run, a full disk.
"""

from __future__ import annotations

import os

from bad_inputs import (
    BAD_YAML,
    BAD_YAML_ERROR,
    FILE,
    Case,
    dead_pid,
    distill_args,
    intact_after_out_of_memory,
    lock_held_by,
    other_vocabulary,
    out_of_memory,
    prepare_args,
    train_args,
    write,
)

from transformer.checkpoint import load_checkpoint

PREPARE = [
    Case("prepare-missing-config", "prepare", ["--config", "{tmp}/none.yaml"], "config file not found"),
    Case("prepare-config-not-utf8", "prepare", ["--config", "{tmp}/bad.yaml"], BAD_YAML_ERROR, BAD_YAML),
    Case("prepare-not-yaml", "prepare", ["--config", "{tmp}/c.yaml"], "is not valid YAML", write("c.yaml", "a: [")),
    Case("prepare-list-config", "prepare", ["--config", "{tmp}/c.yaml"], "must hold a mapping", write("c.yaml", "- 1")),
    Case("prepare-unknown-key", "prepare", prepare_args("model.d_modle=3"), "unknown config key 'model.d_modle'"),
    Case("prepare-bad-override", "prepare", prepare_args("model"), "use section.key=value"),
    Case("prepare-wrong-type", "prepare", prepare_args("model.d_model=abc"), "model.d_model must be an integer"),
    Case("prepare-missing-data", "prepare", prepare_args("data.train={{tsv: {tmp}/none.tsv}}"), "data file not found"),
    Case("prepare-src-without-tgt", "prepare", prepare_args("data.train={{src: {ref}}}"), "also needs `tgt`"),
    Case("prepare-vocab-too-small", "prepare", prepare_args("data.vocab_size=4"), "must be at least 16"),
    Case(
        "prepare-not-utf8",
        "prepare",
        prepare_args("data.train={{src: {w}/latin1.txt, tgt: {w}/latin1.txt}}"),
        "latin1.txt line 3 is not valid UTF-8",
    ),
    Case("prepare-unequal-files", "prepare", prepare_args("data.train={{src: {w}/short.txt, tgt: {ref}}}"), "lines"),
    Case(
        "prepare-cache-under-a-file",
        "prepare",
        prepare_args("data.cache_dir={tmp}/file/cache", "data.vocab_size=200"),
        "a part of the path is a file",
        FILE,
    ),
    Case("prepare-zero-max-tokens", "prepare", prepare_args("data.max_tokens_per_sentence=0"), "must be positive"),
    Case("prepare-same-languages", "prepare", prepare_args("data.tgt_lang=es"), "must differ"),
]
TRAIN = [
    Case("train-fp16-on-cpu", "train", train_args("train.precision=fp16"), "fp16 needs a CUDA device"),
    Case(
        "train-sentences-over-max-positions",
        "train",
        train_args("data.max_tokens_per_sentence=300"),
        "exceeds model.max_positions (256)",
    ),
    Case(
        "train-out-dir-under-a-file",
        "train",
        train_args("train.out_dir={tmp}/file/run", "train.max_steps=1"),
        "a part of the path is a file",
        FILE,
    ),
    Case("train-resume-nothing", "train", train_args(extra=("--resume",)), "checkpoint not found"),
    Case(
        "train-resume-averaged",
        "train",
        train_args(extra=("--resume", "{w}/run_avg.pt")),
        "holds no training state (no optimizer",
    ),
    Case(
        "train-resume-other-architecture",
        "train",
        train_args("model.d_ff=96", extra=("--resume", "{run}/checkpoint_last.pt")),
        "does not fit the model: decoder.layers.0.ff.linear1.bias is 64 there but 96",
    ),
    Case("train-resume-garbage", "train", train_args(extra=("--resume", "{w}/garbage.pt")), "not a readable"),
    Case("train-resume-pickle", "train", train_args(extra=("--resume", "{w}/evil.pt")), "is not a readable checkpoint"),
    Case(
        "train-locked-run-dir",
        "train",
        train_args("train.max_steps=1"),
        f"(PID {os.getppid()} ",
        lock_held_by(os.getppid),
        check=lambda tmp, out, err: os.listdir(tmp / "run") == ["train.lock"],
    ),
    Case(
        "train-stale-lock",
        "train",
        train_args("train.max_steps=1"),
        None,
        lock_held_by(dead_pid),
        check=lambda tmp, out, err: (tmp / "run/checkpoint_1.pt").is_file() and not (tmp / "run/train.lock").exists(),
    ),
    Case("train-bad-max-time", "train", train_args("train.max_time=soon"), "bad duration 'soon'"),
    Case("train-config-not-utf8", "train", ["--config", "{tmp}/bad.yaml"], BAD_YAML_ERROR, BAD_YAML),
    Case(
        "train-base-config-not-utf8",
        "train",
        ["--config", "{tmp}/child.yaml"],
        BAD_YAML_ERROR,
        lambda tmp, mp: (BAD_YAML(tmp, mp), write("child.yaml", "base: bad.yaml\n")(tmp, mp)),
    ),
    Case(
        "train-cuda-out-of-memory",
        "train",
        train_args("train.max_steps=4", "train.save_every=2"),
        "out of GPU memory in a training update, on a micro-batch of ",
        out_of_memory("transformer.training.optim.train_update", after=2),
        check=intact_after_out_of_memory,
    ),
    Case("train-bad-prepare-timeout", "train", train_args("train.prepare_timeout=soon"), "bad duration"),
    Case("train-zero-nan-patience", "train", train_args("train.nan_patience=0"), "train.nan_patience must be positive"),
    Case("train-init-from-missing", "train", train_args("train.init_from={tmp}/none.pt"), "checkpoint not found"),
    Case("train-init-from-other-model", "train", train_args("train.init_from={ckpt}"), "does not fit the model"),
    Case("train-tokenizer-not-a-model", "train", train_args("data.tokenizer={src}"), "model is not readable"),
    Case("train-tokenizer-missing", "train", train_args("data.tokenizer={tmp}/none.model"), "cannot read the"),
    Case("train-unknown-precision", "train", train_args("train.precision=fp8"), "train.precision must be one of"),
    Case("train-zero-keep-last", "train", train_args("train.keep_last=0"), "train.keep_last must be positive"),
    Case("train-no-train-split", "train", train_args("data.train=null"), "data.train is not configured"),
]
AVERAGE = [
    Case(
        "average-output-is-input",
        "average",
        ["--inputs", "{ckpt}", "{w}/avg.pt", "--output", "{ckpt}"],
        "is the same file as --inputs",
    ),
    Case(
        "average-output-is-input-in-dir",
        "average",
        ["--dir", "{w}/ckpt_dir", "--output", "{w}/ckpt_dir/checkpoint_2.pt"],
        "same file as --inputs",
    ),
    Case(
        "average-last-zero",
        "average",
        ["--dir", "{w}/ckpt_dir", "--last", "0", "--output", "{tmp}/a.pt"],
        "must be >= 1",
    ),
    Case(
        "average-last-negative",
        "average",
        ["--dir", "{w}/ckpt_dir", "--last", "-1", "--output", "{tmp}/a.pt"],
        "must be >= 1",
    ),
    Case("average-empty-dir", "average", ["--dir", "{w}/empty_dir", "--output", "{tmp}/a.pt"], "no numbered"),
    Case(
        "average-other-architecture",
        "average",
        ["--inputs", "{ckpt}", "{w}/other.pt", "--output", "{tmp}/a.pt"],
        "linear1.weight is 40x16 there but 24x16 in",
    ),
    Case("average-missing-input", "average", ["--inputs", "{tmp}/none.pt", "--output", "{tmp}/a.pt"], "not found"),
    Case("average-pickle-input", "average", ["--inputs", "{w}/evil.pt", "--output", "{tmp}/a.pt"], "not a readable"),
    Case("average-no-inputs", "average", ["--output", "{tmp}/a.pt"], "no checkpoints to average"),
    Case(
        "average-output-under-a-file",
        "average",
        ["--inputs", "{ckpt}", "--output", "{tmp}/file/a.pt"],
        "a part of the path is a file",
        FILE,
    ),
    Case(
        "average-dir-last-one",
        "average",
        ["--dir", "{w}/ckpt_dir", "--last", "1", "--output", "{tmp}/a.pt"],
        None,
        check=lambda tmp, out, err: load_checkpoint(tmp / "a.pt")["averaged_from"][0].endswith(
            "ckpt_dir/checkpoint_2.pt"
        ),
    ),
]
if os.path.exists("/dev/full"):  # a full disk, as the kernel reports it
    AVERAGE += [
        Case("average-output-dev-full", "average", ["--inputs", "{ckpt}", "--output", "/dev/full"], "disk is full"),
    ]
DISTILL = [
    Case(
        "distill-missing-teacher", "distill", distill_args(teacher=("{tmp}/none.pt",)), "teacher checkpoint not found"
    ),
    Case("distill-no-teacher", "distill", ["--config", "{cfg}", "--out", "{tmp}/d"], "stage needs the teacher"),
    Case("distill-garbage-teacher", "distill", distill_args(teacher=("{w}/garbage.pt",)), "not a readable"),
    Case("distill-pickle-teacher", "distill", distill_args(teacher=("{w}/evil.pt",)), "not a readable"),
    Case(
        "distill-teachers-of-two-vocabularies",
        "distill",
        distill_args(teacher=("{ckpt}", "{tmp}/other.pt")),
        "have different vocabularies",
        other_vocabulary("other.pt"),
    ),
    Case("distill-unknown-key", "distill", distill_args("model.d_modle=3"), "unknown config key 'model.d_modle'"),
    Case(
        "distill-student-file-unknown-key",
        "distill",
        ["--teacher", "{ckpt}", "--config", "{tmp}/s.yaml", "--out", "{tmp}/d"],
        "unknown config key 'train.max_stesp'",
        write("s.yaml", "train:\n  max_stesp: 3\n"),
    ),
    Case(
        "distill-teacher-of-the-other-direction",
        "distill",
        distill_args("data.src_lang=yy", "data.tgt_lang=xx"),
        "the teacher translates xx->yy but the student config is yy->xx",
    ),
    Case("distill-no-train-split", "distill", distill_args("data.train=null"), "the student config has no data.train"),
    Case("distill-filter-first", "distill", distill_args(extra=("--stage", "filter")), "run the translate stage"),
    Case("distill-train-first", "distill", distill_args(extra=("--stage", "train")), "run the filter stage first"),
    Case("distill-average-first", "distill", distill_args(extra=("--stage", "average")), "no numbered checkpoints"),
    Case("distill-zero-chunk", "distill", distill_args(extra=("--chunk-lines", "0")), "--chunk-lines must be positive"),
    Case(
        "distill-ratios-crossed",
        "distill",
        distill_args(extra=("--min-length-ratio", "4")),
        "--min-length-ratio (4.0) exceeds --max-length-ratio",
    ),
    Case("distill-zero-beam", "distill", distill_args(extra=("--beam", "0")), "must be >= 1, got 0"),
    Case(
        "distill-chunks-of-another-translation",
        "distill",
        distill_args(extra=("--stage", "translate")),
        "holds chunks of another translation",
        write("d/chunks/manifest.json", '{"chunk_lines": 7}'),
    ),
    Case(
        "distill-out-under-a-file",
        "distill",
        [a.replace("{tmp}/d", "{tmp}/file/d") for a in distill_args()],
        "a part of the path is a file",
        FILE,
    ),
]

CALIBRATE = [
    Case("calibrate-missing-checkpoint", "calibrate", ["--checkpoint", "{tmp}/none.pt"], "checkpoint not found"),
    Case("calibrate-pickle-checkpoint", "calibrate", ["--checkpoint", "{w}/evil.pt"], "not a readable"),
    Case(
        "calibrate-no-valid-split",
        "calibrate",
        ["--checkpoint", "{ckpt}", "--output", "{tmp}/c.pt"],
        "the config has no data.valid split",
    ),
    Case(
        "calibrate-missing-valid-file",
        "calibrate",
        ["--checkpoint", "{ckpt}", "--set", "data.valid={{src: {tmp}/none.src, tgt: {tmp}/none.ref}}"],
        "none.src",
    ),
    Case(
        "calibrate-output-is-config",
        "calibrate",
        ["--checkpoint", "{ckpt}", "--config", "{tmp}/c.yaml", "--output", "{tmp}/c.yaml"],
        "is the same file as --config",
        write("c.yaml", "decode: {beam_size: 2}\n"),
    ),
    Case("calibrate-change-model", "calibrate", ["--checkpoint", "{ckpt}", "--set", "model.d_ff=8"], "cannot change"),
    Case("calibrate-zero-lines", "calibrate", ["--checkpoint", "{ckpt}", "--lines", "0"], "must be >= 1"),
    Case(
        "calibrate-a-trained-run",
        "calibrate",
        ["--checkpoint", "{run}/checkpoint_last.pt", "--output", "{tmp}/c.pt", "--lines", "10", "--device", "cpu"],
        None,
        check=lambda tmp, out, err: "threshold" in load_checkpoint(tmp / "c.pt")["confidence"] and "calibrated" in out,
    ),
]
