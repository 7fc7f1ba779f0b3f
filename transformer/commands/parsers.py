"""What every command's parser is built from: the help texts (one summary line, a description and examples per
command), the formatter that shows each flag's default, and an integer type with a lower bound."""

from __future__ import annotations

import argparse
import textwrap
from collections.abc import Callable


def count(minimum: int) -> Callable[[str], int]:
    """An argparse type: an integer >= `minimum` (argparse then reports a bad value with exit code 2)."""

    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"must be an integer, got {text!r}") from None
        if value < minimum:
            raise argparse.ArgumentTypeError(f"must be >= {minimum}, got {value}")
        return value

    return parse


CONFIG_KEYS_HELP = (
    "Config keys: every key of the model, data, train and decode sections is a field of the dataclasses in "
    "transformer/config/sections.py, each commented with its meaning, unit and default (docs/training.md: Configs, "
    "Data). "
    "Relative data paths in a config resolve against its folder; --set paths and outputs (cache_dir, out_dir) "
    "against the current directory."
)


class HelpFormatter(argparse.RawDescriptionHelpFormatter):
    """Shows each flag's default (when it has a meaningful one) and keeps the examples' line breaks."""

    def _get_help_string(self, action: argparse.Action) -> str:
        text = action.help or ""
        default = action.default
        meaningless = any(default is v for v in (None, False, argparse.SUPPRESS)) or default == []
        if "%(default)" not in text and not meaningless:
            text += " (default: %(default)s)"
        return text


HELP = {  # command -> (summary, description, examples): `python -m transformer --help` lists the summaries;
    # `transformer-COMMAND --help` shows the description above the flags and the examples below them
    "prepare": (
        "train the vocabulary and encode the data splits into the cache",
        "Train the SentencePiece vocabulary on data.train and encode every configured split into the cache "
        "(data.cache_dir); training then reuses it.",
        "  transformer-prepare --config demo\n  transformer-prepare --config my.yaml --set data.vocab_size=16000",
    ),
    "train": (
        "train a model from a config",
        "Train a Transformer translation model.",
        "  transformer-train --config demo --set train.max_time=30m\n"
        "  transformer-train --config /abs/path/my.yaml --resume\n  transformer-train --config demo --print-config",
    ),
    "average": (
        "average the weights of checkpoints",
        "Average checkpoint weights (the paper averages the last 5 checkpoints of a base model, 20 of a big one).",
        "  transformer-average --dir runs/demo --last 5 --output runs/demo/averaged.pt\n"
        "  transformer-average --inputs a.pt b.pt --output avg.pt",
    ),
    "calibrate": (
        "fit a checkpoint's confidence calibration on its validation split",
        "Translate the validation split of the checkpoint's config (or --config's), score each line with sentence "
        "chrF, add inputs that are not the source language, and store the confidence's calibration and default "
        "threshold in the checkpoint (docs/decoding.md, Confidence). Training and transformer-average do this "
        "themselves.",
        "  transformer-calibrate --checkpoint runs/demo/averaged.pt\n"
        "  transformer-calibrate --checkpoint CKPT --config demo --output calibrated.pt",
    ),
    "translate": (
        "translate sentences with a checkpoint",
        "Translate TEXT arguments, --input FILE or stdin (streamed): one output line per input line. At a terminal "
        "it prompts for one sentence at a time.",
        '  transformer-translate --checkpoint runs/demo/checkpoint_last.pt "Y dijo Dios: Sea la luz."\n'
        "  cat input.es | transformer-translate --checkpoint CKPT > output.en\n"
        "  transformer-translate --checkpoint CKPT --input in.es --output - --beam 8 --nbest 2\n"
        '  transformer-translate --checkpoint CKPT --alignment "Y dijo Dios: Sea la luz."\n'
        "  transformer-translate --checkpoint CKPT --input in.es --confidence --min-confidence auto",
    ),
    "evaluate": (
        "translate a test set and score it with sacreBLEU",
        "Translate a test set and print sacreBLEU scores with their signatures (default: the config's data.test "
        "split), or score existing output with --hyp F --ref F, through sacreBLEU's own API.",
        "  transformer-evaluate --checkpoint runs/demo/checkpoint_last.pt\n"
        "  transformer-evaluate --checkpoint CKPT --src test.es --ref test.en --metrics bleu chrf ter --json -\n"
        "  transformer-evaluate --hyp base.en new.en --ref ref1.en ref2.en --paired-bs --chrf-word-order 2\n"
        "  cat out.en | transformer-evaluate --hyp - --ref test.en --tokenize intl --lowercase",
    ),
    "score": (
        "score given translations: log-probability and perplexity under the model",
        "Each target's log-probability under teacher forcing, as TSV lines 'log_prob per_token ppl tokens' or --json.",
        "  transformer-score --checkpoint runs/demo/checkpoint_last.pt --src test.es --tgt test.en > scores.tsv",
    ),
    "export": (
        "write a checkpoint as a Hugging Face or CTranslate2 model",
        "Write a checkpoint as a Hugging Face model directory (MarianMTModel for post-LN, "
        "PegasusForConditionalGeneration for pre-LN; safetensors, MarianTokenizer) or a CTranslate2 model.",
        "  transformer-export --checkpoint runs/demo/checkpoint_last.pt --format hf --output exported/hf\n"
        "  transformer-export --checkpoint runs/demo/checkpoint_last.pt --format ctranslate2 --output exported/ct2 "
        "--quantization int8",
    ),
    "import": (
        "turn a Hugging Face Marian (OPUS-MT) directory into a checkpoint",
        "Read a MarianMTModel.save_pretrained directory and its tokenizer files (source.spm, target.spm, vocab.json, "
        "tokenizer_config.json) and write a checkpoint that translates, evaluates, scores and fine-tunes like any "
        "other (docs/importing.md).",
        "  transformer-import --format hf opus-mt-es-en --output opus-mt-es-en.pt",
    ),
    "distill": (
        "sequence-level distillation: a teacher translates the corpus, a student trains on it",
        "Sequence-level knowledge distillation (Kim & Rush, 2016) in stages, each runnable on its own: the teacher "
        "(one checkpoint, an ensemble, an imported model) translates the source side of the student config's "
        "data.train with beam search into DIR/teacher.tsv (in chunks: resumable, sharded under torchrun), the "
        "filters drop doubtful pairs into DIR/distilled.tsv (their counts in DIR/filters.json), the student trains "
        "on it in DIR/student and its last checkpoints are averaged (docs/training.md, Distillation).",
        "  transformer-distill --teacher runs/demo/averaged.pt --config student --out runs/distill\n"
        "  transformer-distill --teacher a.pt b.pt --config student --out runs/distill --stage translate\n"
        "  torchrun --nproc_per_node 2 -m transformer distill --teacher T.pt --config student --out D\n"
        "  transformer-distill --config student --out runs/distill --stage filter --min-score -1.5",
    ),
    "serve": (
        "serve translations over HTTP (LibreTranslate's API, a native API, a page)",
        "Serve models over HTTP, one per language pair (several checkpoints after one --model: an ensemble), pairs "
        "without a model of their own through --pivot: LibreTranslate's POST /translate, /detect and /languages, "
        "the native POST /api/translate (n-best, scores, alignments, search settings, the route), a page at /, GET "
        "/health and GET /metrics. Concurrent requests are decoded together, each model in its own worker. Needs "
        "the serve extra (docs/serving.md).",
        "  transformer-serve --model runs/es-en/averaged.pt --model runs/en-es/averaged.pt\n"
        "  transformer-serve --checkpoint a.pt b.pt --port 8080 --api-keys keys.txt --req-limit 60\n"
        "  curl -s localhost:5000/translate -H 'Content-Type: application/json' "
        '-d \'{"q": "Hola.", "source": "es", "target": "en"}\'',
    ),
    "keys": (
        "list, add and remove the API keys of transformer-serve --api-keys, each with its own limits",
        "The API keys file of transformer-serve --api-keys FILE: one key a line, with its own requests per minute "
        "and characters per request if any (KEY [REQ_LIMIT [CHAR_LIMIT]]). A running server reads the file again "
        "when it changes. `add` prints the key (a new random one unless --key); the file is replaced atomically "
        "(docs/serving.md, Keys and limits).",
        "  transformer-keys --api-keys keys.txt add --req-limit 60\n"
        "  transformer-keys --api-keys keys.txt add --key team-a --req-limit 600 --char-limit 20000\n"
        "  transformer-keys --api-keys keys.txt list\n"
        "  transformer-keys --api-keys keys.txt remove team-a",
    ),
}


def build_parser(command: str, *arguments: Callable[[argparse.ArgumentParser], None]) -> argparse.ArgumentParser:
    """transformer-COMMAND's parser: --version, then the flags each of `arguments` adds, in order; its --help shows
    every default, the command's HELP text and where the config keys are documented."""
    from transformer import __version__

    _, description, examples = HELP[command]
    parser = argparse.ArgumentParser(
        prog=f"transformer-{command}",
        description=description,
        formatter_class=HelpFormatter,
        epilog=f"examples:\n{examples}\n\n{textwrap.fill(CONFIG_KEYS_HELP, 100)}",
    )
    parser.add_argument("--version", action="version", version=f"%(prog)s {__version__}")
    for add in arguments:
        add(parser)
    return parser
