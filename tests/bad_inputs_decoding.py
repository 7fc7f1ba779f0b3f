"""The bad-input catalogue's cases for transformer-translate and transformer-evaluate, which
tests/test_bad_inputs.py runs: outputs that are an input, undecodable and empty inputs from files and standard
input, checkpoints that are not one or do not fit, settings out of range, running out of GPU memory, a full disk.
"""

from __future__ import annotations

import os

from bad_inputs import (
    BAD_UTF8_AT_3,
    BAD_YAML,
    BAD_YAML_ERROR,
    EMPTY,
    FILE,
    OLD,
    Case,
    link,
    out_of_memory,
    output_lines,
    stdin,
    write,
)

TRANSLATE = [
    Case(
        "translate-output-is-input",
        "translate",
        ["--checkpoint", "{ckpt}", "--input", "{src}", "--output", "{src}"],
        "is the same file as --input",
    ),
    Case(
        "translate-output-symlink-to-input",
        "translate",
        ["--checkpoint", "{ckpt}", "--input", "{tmp}/in.txt", "--output", "{tmp}/link.txt"],
        "is the same file as --input",
        link("sym", "in.txt", "link.txt"),
    ),
    Case(
        "translate-output-hardlink-to-input",
        "translate",
        ["--checkpoint", "{ckpt}", "--input", "{tmp}/in.txt", "--output", "{tmp}/hard.txt"],
        "is the same file as --input",
        link("hard", "in.txt", "hard.txt"),
    ),
    Case(
        "translate-output-is-checkpoint",
        "translate",
        ["--checkpoint", "{ckpt}", "--output", "{ckpt}", "x"],
        "is the same file as --checkpoint",
    ),
    Case(
        "translate-bad-utf8-line-3",
        "translate",
        ["--checkpoint", "{ckpt}", "--input", "{tmp}/in.txt", "--output", "{tmp}/out.txt", "--chunk-lines", "1"],
        "in.txt line 3 is not valid UTF-8",
        lambda tmp, mp: (BAD_UTF8_AT_3(tmp, mp), OLD(tmp, mp)),
    ),
    Case(
        "translate-latin1-stdin",
        "translate",
        ["--checkpoint", "{ckpt}"],
        "standard input line 2 is not valid UTF-8",
        stdin(b"the cat\ncaf\xe9\n"),
    ),
    Case(
        "translate-binary-stdin",
        "translate",
        ["--checkpoint", "{ckpt}"],
        "standard input line 1 is not valid",
        stdin(b"\x89PNG\r\n\x1a\n\x00\xff"),
    ),
    Case("translate-closed-stdin", "translate", ["--checkpoint", "{ckpt}"], "standard input is closed", stdin(None)),
    Case(
        "translate-bom-empty-first-line",
        "translate",
        ["--checkpoint", "{ckpt}", "--input", "{w}/bom.txt"],
        None,
        check=output_lines(["", None]),
    ),
    Case(
        "translate-bom-stdin",
        "translate",
        ["--checkpoint", "{ckpt}"],
        None,
        stdin(b"\xef\xbb\xbf\nthe cat\n"),
        check=output_lines(["", None]),
    ),
    Case("translate-negative-threads", "translate", ["--checkpoint", "{ckpt}", "--threads", "-1", "x"], "must be >= 0"),
    Case(
        "translate-zero-chunk-lines", "translate", ["--checkpoint", "{ckpt}", "--chunk-lines", "0", "x"], "must be >= 1"
    ),
    Case("translate-missing-checkpoint", "translate", ["--checkpoint", "{tmp}/none.pt", "x"], "checkpoint not found"),
    Case("translate-garbage-checkpoint", "translate", ["--checkpoint", "{w}/garbage.pt", "x"], "not a readable"),
    Case("translate-pickle-checkpoint", "translate", ["--checkpoint", "{w}/evil.pt", "x"], "not a readable"),
    Case(
        "translate-contradicting-config",
        "translate",
        ["--checkpoint", "{w}/contradicting.pt", "x"],
        "the checkpoint does not fit the model: ",
    ),
    Case(
        "translate-averaged-checkpoint",
        "translate",
        ["--checkpoint", "{w}/avg.pt", "the cat", "the dog"],
        None,
        check=output_lines([None, None]),
    ),
    Case(
        "translate-change-model",
        "translate",
        ["--checkpoint", "{ckpt}", "--set", "model.d_ff=40", "x"],
        "cannot change model.d_ff",
    ),
    Case(
        "translate-missing-input",
        "translate",
        ["--checkpoint", "{ckpt}", "--input", "{tmp}/none.txt"],
        "input file not found",
    ),
    Case("translate-text-and-input", "translate", ["--checkpoint", "{ckpt}", "--input", "{src}", "x"], "not both"),
    Case(
        "translate-fp16-on-cpu",
        "translate",
        ["--checkpoint", "{ckpt}", "--precision", "fp16", "--device", "cpu", "x"],
        "needs a CUDA device",
    ),
    Case(
        "translate-unknown-device", "translate", ["--checkpoint", "{ckpt}", "--device", "tpu9", "x"], "unknown device"
    ),
    Case(
        "translate-output-under-a-file",
        "translate",
        ["--checkpoint", "{ckpt}", "--output", "{tmp}/file/o", "x"],
        "a part of the path is a file",
        FILE,
    ),
    Case(
        "translate-output-is-a-folder",
        "translate",
        ["--checkpoint", "{ckpt}", "--output", "{tmp}", "x"],
        "it is a folder",
    ),
    Case("translate-beam-zero", "translate", ["--checkpoint", "{ckpt}", "--beam", "0", "x"], "beam_size must be >= 1"),
    Case("translate-no-checkpoint", "translate", ["x"], "--checkpoint is required"),
    Case(
        "translate-min-confidence-auto-uncalibrated",
        "translate",
        ["--checkpoint", "{ckpt}", "--min-confidence", "auto", "x"],
        "--min-confidence auto uses the checkpoint's threshold",
    ),
    Case(
        "translate-min-confidence-out-of-range",
        "translate",
        ["--checkpoint", "{ckpt}", "--min-confidence", "1.5", "x"],
        "must be a number in [0, 1] or auto",
    ),
    Case(
        "translate-confidence-of-a-document",
        "translate",
        ["--checkpoint", "{ckpt}", "--input", "{src}", "--format", "text", "--confidence"],
        "--confidence and --min-confidence work line by line",
    ),
    Case(
        "translate-protect-pattern-could-stall",
        "translate",
        ["--checkpoint", "{ckpt}", "--protect", "(a+)+b", "x"],
        "has a repeat inside a repeat, which can take exponential time",
    ),
    Case(
        "translate-protect-and-no-protect",
        "translate",
        ["--checkpoint", "{ckpt}", "--protect", "x", "--no-protect", "x"],
        "--no-protect keeps nothing as written",
    ),
    Case(
        "translate-po-unterminated-string",
        "translate",
        ["--checkpoint", "{ckpt}", "--input", "{tmp}/bad.po", "--format"],
        "bad.po: line 1: a string that never ends",
        write("bad.po", 'msgid "abc\nmsgstr ""\n'),
    ),
    Case(
        "translate-xliff-entity-bomb",
        "translate",
        ["--checkpoint", "{ckpt}", "--input", "{tmp}/bomb.xlf", "--format"],
        "bomb.xlf: line 1: declares an XML entity",
        write("bomb.xlf", '<!DOCTYPE x [<!ENTITY a "aa"><!ENTITY b "&a;&a;">]><xliff version="1.2"/>'),
    ),
    Case(
        "translate-config-not-utf8",
        "translate",
        ["--checkpoint", "{ckpt}", "--config", "{tmp}/bad.yaml", "x"],
        BAD_YAML_ERROR,
        BAD_YAML,
    ),
    Case(
        "translate-cuda-out-of-memory",
        "translate",  # 12 lines of a few tokens: one batch of 12 sentences
        ["--checkpoint", "{ckpt}", "--input", "{src}", "--output", "{tmp}/out.txt"],
        "out of GPU memory decoding a batch of 12 sentences of up to ",
        lambda tmp, mp: (OLD(tmp, mp), out_of_memory("transformer.decoding.relaxation.generate")(tmp, mp)),
        check=lambda tmp, out, err: (
            "beam 2 (tried to allocate 2.50 GiB): lower --max-tokens (decode.max_tokens, "
            "now 8000), e.g. --max-tokens 4000" in err
        ),
    ),
    Case(
        "translate-cuda-out-of-memory-one-sentence",
        "translate",
        ["--checkpoint", "{ckpt}", "the cat"],
        "one sentence does not fit: a smaller --beam or --max-len-b, or --device cpu",
        out_of_memory("transformer.decoding.relaxation.generate"),
    ),
]
EVALUATE = [
    Case(
        "evaluate-output-is-ref",
        "evaluate",
        ["--checkpoint", "{ckpt}", "--src", "{src}", "--ref", "{ref}", "--output", "{ref}"],
        "is the same file as --ref",
    ),
    Case(
        "evaluate-output-is-config-test-ref",
        "evaluate",
        ["--checkpoint", "{ckpt}", "--output", "{ref}"],
        "is the same file as data.test",
    ),
    Case(
        "evaluate-json-is-ref",
        "evaluate",
        ["--checkpoint", "{ckpt}", "--json", "{ref}", "--output", "{tmp}/h"],
        "is the same file as data.test",
    ),
    Case(
        "evaluate-json-is-hyp",
        "evaluate",
        ["--hyp", "{tmp}/h.txt", "--ref", "{tmp}/h.txt", "--json", "{tmp}/h.txt"],
        "is the same file as --hyp",
        write("h.txt", "the cat\n"),
    ),
    Case(
        "evaluate-json-is-output",
        "evaluate",
        ["--checkpoint", "{ckpt}", "--output", "{tmp}/h", "--json", "{tmp}/h"],
        "is the same file as the hypotheses file",
    ),
    Case("evaluate-hyp-length-mismatch", "evaluate", ["--hyp", "{w}/short.txt", "--ref", "{ref}"], "has 1 lines but"),
    Case("evaluate-hyp-without-ref", "evaluate", ["--hyp", "{w}/short.txt"], "--hyp needs --ref"),
    Case("evaluate-src-without-ref", "evaluate", ["--checkpoint", "{ckpt}", "--src", "{src}"], "go together"),
    Case(
        "evaluate-json-under-a-file",
        "evaluate",
        ["--hyp", "{ref}", "--ref", "{ref}", "--json", "{tmp}/file/s.json"],
        "a part of the path is a file",
        FILE,
    ),
    Case(
        "evaluate-ref-not-utf8",
        "evaluate",
        ["--hyp", "{w}/latin1.txt", "--ref", "{w}/latin1.txt"],
        "latin1.txt line 3 is not valid UTF-8",
    ),
    Case("evaluate-nothing-to-do", "evaluate", [], "give --checkpoint CKPT"),
    Case(
        "evaluate-score-nothing",
        "evaluate",
        ["--hyp", "{tmp}/empty.txt", "--ref", "{tmp}/empty.txt"],
        "nothing to score: ",
        EMPTY,
        check=lambda tmp, out, err: f"{tmp}/empty.txt has no lines" in err,
    ),
    Case(
        "evaluate-score-nothing-from-stdin",
        "evaluate",
        ["--hyp", "-", "--ref", "{tmp}/empty.txt"],
        "empty.txt has no lines",
        lambda tmp, mp: (EMPTY(tmp, mp), stdin(b"")(tmp, mp)),
    ),
    Case(
        "evaluate-translate-nothing",
        "evaluate",
        ["--checkpoint", "{ckpt}", "--src", "{tmp}/empty.txt", "--ref", "{tmp}/empty.txt", "--output", "{tmp}/h"],
        "nothing to score: ",
        EMPTY,
        check=lambda tmp, out, err: not (tmp / "h").exists(),
    ),
    Case(
        "evaluate-empty-test-split",
        "evaluate",
        [
            "--checkpoint",
            "{ckpt}",
            "--set",
            "data.test.src={tmp}/empty.txt",
            "--set",
            "data.test.tgt={tmp}/empty.txt",
            "--output",
            "{tmp}/h",
        ],
        "is empty: no sentence pairs to read",
        EMPTY,
    ),
    Case(
        "evaluate-src-longer-than-ref",
        "evaluate",
        ["--checkpoint", "{ckpt}", "--src", "{src}", "--ref", "{w}/short.txt", "--output", "{tmp}/h"],
        "test.src has 12 lines but ",
        check=lambda tmp, out, err: "short.txt has 1" in err,
    ),
    Case(
        "evaluate-cuda-out-of-memory",
        "evaluate",
        ["--checkpoint", "{ckpt}", "--output", "{tmp}/h"],
        "lower --max-tokens (decode.max_tokens, now 8000)",
        out_of_memory("transformer.decoding.relaxation.generate"),
        check=lambda tmp, out, err: not (tmp / "h").exists(),
    ),
    Case(
        "evaluate-test-set-without-langpair",
        "evaluate",
        ["--checkpoint", "{ckpt}", "--test-set", "wmt14"],
        "--test-set needs --langpair",
    ),
    Case("evaluate-no-valid-split", "evaluate", ["--checkpoint", "{ckpt}", "--split", "valid"], "no data.valid split"),
    Case("evaluate-contradicting-config", "evaluate", ["--checkpoint", "{w}/contradicting.pt"], "does not fit"),
    Case(
        "evaluate-bom-ref",
        "evaluate",
        ["--hyp", "{w}/bom.txt", "--ref", "{w}/bom.txt"],
        None,
        check=lambda tmp, out, err: "hyp_len = 2 ref_len = 2" in out,
    ),  # the BOM is not a word
]
if os.path.exists("/dev/full"):  # a full disk, as the kernel reports it
    TRANSLATE += [
        Case(
            "translate-output-dev-full",
            "translate",
            ["--checkpoint", "{ckpt}", "--output", "/dev/full", "x"],
            "cannot write /dev/full: the disk is full",
        ),
    ]
    EVALUATE += [
        Case(
            "evaluate-json-dev-full",
            "evaluate",
            ["--hyp", "{ref}", "--ref", "{ref}", "--json", "/dev/full"],
            "cannot write /dev/full: the disk is full",
        ),
    ]

KEYS = [  # transformer-keys: the keys file is left as it was
    Case(
        "keys-bad-line",
        "keys",
        ["--api-keys", "{tmp}/keys.txt", "add", "--key", "new"],
        "keys.txt line 2: write KEY [REQ_LIMIT [CHAR_LIMIT]]",
        write("keys.txt", "good 5\nbad -3\n"),
    ),
    Case(
        "keys-remove-unknown",
        "keys",
        ["--api-keys", "{tmp}/keys.txt", "remove", "nobody"],
        "has no key 'nobody'",
        write("keys.txt", "good 5\n"),
    ),
    Case(
        "keys-not-utf8",
        "keys",
        ["--api-keys", "{tmp}/keys.txt", "list"],
        "cannot read the API keys file",
        write("keys.txt", b"caf\xe9\n"),
    ),
    Case("keys-zero-limit", "keys", ["--api-keys", "{tmp}/k.txt", "add", "--req-limit", "0"], "must be positive"),
]
