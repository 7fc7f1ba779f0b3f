"""`make demo`: train on the bundled Bible corpus, translate held-out verses, and score the test books.

    python scripts/demo.py --config configs/demo.yaml --out runs/demo --time 11m

Stages, each visible: SentencePiece training and encoding (cached), training with a progress bar until the time
budget, then Spanish test verses beside the reference and the model's English, then BLEU and chrF (sacrebleu) on
the whole test split with beam search. Uses a GPU when there is one.
"""

from __future__ import annotations

import argparse
import json
import sys
import textwrap
import time
from pathlib import Path

from transformer.cli import user_errors_exit_2


def _banner(text: str) -> None:
    print(f"\n=== {text} ===", flush=True)


def _show_examples(sources: list[str], references: list[str], hypotheses: list[str], count: int, src_lang: str) -> None:
    step = max(len(sources) // count, 1)
    width = max(len(src_lang), 3)
    for i in range(0, step * count, step)[:count]:
        for label, text in ((src_lang, sources[i]), ("ref", references[i]), ("mt", hypotheses[i])):
            label = f"{label:<{width}}"
            indent = " " * (width + 3) + "| "
            print(textwrap.fill(text, width=110, initial_indent=f"  {label} | ", subsequent_indent=indent))
        print()


@user_errors_exit_2
def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--config", default="configs/demo.yaml")
    parser.add_argument("--out", default="runs/demo", help="run directory (replaced)")
    parser.add_argument("--time", default="11m", help="training wall-time budget, e.g. 11m or 30m")
    parser.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE")
    parser.add_argument("--examples", type=int, default=5, help="test verses to show")
    args = parser.parse_args(argv)

    import shutil

    import torch

    from transformer.checkpoint import load_for_inference
    from transformer.config import load_config
    from transformer.data import load_pairs
    from transformer.evaluation import corpus_scores
    from transformer.trainer import Trainer
    from transformer.translator import Translator

    overrides = [f"train.out_dir={args.out}", f"train.max_time={args.time}", *args.overrides]
    config = load_config(args.config, overrides)
    shutil.rmtree(args.out, ignore_errors=True)
    device = "cuda" if torch.cuda.is_available() else "cpu"
    start = time.time()

    _banner(f"1-2. SentencePiece vocabulary and training ({args.time} budget, {device})")
    result = Trainer(config).run()
    print(f"trained {result['step']} updates in {result['elapsed'] / 60:.1f} min ({result['reason']})")

    _banner(f"3. Translating the held-out test books (beam {config.decode.beam_size})")
    model, tokenizer, config = load_for_inference(Path(args.out) / "checkpoint_last.pt", device)
    sources, references = load_pairs(config.data.test, config.data)
    translator = Translator(model, tokenizer, config.decode, device=device)
    hypotheses = translator.translate_texts(sources)
    (Path(args.out) / "test.hyp").write_text("\n".join(hypotheses) + "\n", encoding="utf-8")
    _show_examples(sources, references, hypotheses, args.examples, config.data.src_lang)

    _banner(f"4. Scores on {len(sources)} test verses")
    scores = corpus_scores(hypotheses, references)
    print(f"BLEU {scores['bleu']:.1f}  {scores['bleu_signature']}")
    print(f"chrF {scores['chrf']:.1f}  {scores['chrf_signature']}")
    summary = {**scores, "updates": result["step"], "reason": result["reason"], "train_minutes": result["elapsed"] / 60,
               "total_minutes": (time.time() - start) / 60, "device": device}  # fmt: skip
    (Path(args.out) / "scores.json").write_text(json.dumps(summary, indent=2) + "\n", encoding="utf-8")
    print(f"total {summary['total_minutes']:.1f} min; hypotheses, scores.json and curves.png in {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
