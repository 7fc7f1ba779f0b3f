"""The configuration's sections: frozen dataclasses holding the project's only defaults, each validated in
`__post_init__`, and `from_dict`, which builds them from a (possibly partial) nested mapping through
`transformer.typecheck` (unknown keys, listing the valid ones with a close-match suggestion, and values of the wrong
type are refused there). Every problem is raised as `ConfigError` (a `UserError`, in errors.py).
"""

from __future__ import annotations

import dataclasses
import logging
import re
import typing
from dataclasses import dataclass, field
from typing import Any, ClassVar, Literal

from transformer.errors import ConfigError
from transformer.typecheck import build, require

log = logging.getLogger(__name__)

# Keys of earlier versions, now gone: a file or --set that names one gets a warning and the key is ignored, and a
# checkpoint that stores one loads as before.
REMOVED_KEYS = {
    ("train", "onednn_linear"): "CPU training matmuls are PyTorch's own",
    ("train", "fast_cpu_dropout"): "dropout is nn.Dropout",
}

Precision = Literal["auto", "bf16", "fp16", "fp32"]  # autocast setting; `transformer.precision` states the rule
PRECISIONS: tuple[str, ...] = typing.get_args(Precision)


def choices(cls: type, name: str) -> tuple[str, ...]:
    """The allowed values of a `Literal` field, e.g. `choices(DecodeConfig, "length_penalty")` for argparse."""
    return typing.get_args(typing.get_type_hints(cls)[name])


@dataclass(frozen=True, kw_only=True)
class ModelConfig:
    d_model: int = 512  # width of every sub-layer output and embedding (paper: 512 base, 1024 big)
    n_heads: int = 8  # attention heads h; d_head = d_model / n_heads
    d_ff: int = 2048  # inner width of the position-wise feed-forward network
    n_encoder_layers: int = 6  # N, encoder layers
    n_decoder_layers: int = 6  # N, decoder layers
    dropout: float = 0.1  # P_drop on sub-layer outputs (before the residual add) and on embeddings + positions
    attention_dropout: float = 0.0  # dropout on attention weights (not in the paper)
    activation_dropout: float = 0.0  # dropout after the feed-forward activation (not in the paper)
    activation: Literal["relu", "gelu", "silu"] = "relu"  # feed-forward non-linearity (paper: ReLU; silu = swish)
    norm_first: bool = False  # False: post-LN LayerNorm(x + Sublayer(x)) as the paper; True: pre-LN + final norm
    layer_norm_eps: float = 1e-5  # epsilon inside LayerNorm's sqrt(var + eps)
    positional: Literal["sinusoidal", "learned"] = "sinusoidal"  # positional encoding (paper: sinusoidal)
    max_positions: int = 1024  # longest sequence, in tokens, the model accepts (source or target)
    share_embeddings: bool = True  # one embedding matrix for source and target (needs a joint vocabulary)
    tie_output: bool = True  # the pre-softmax projection reuses the target embedding matrix
    scale_embedding: bool = True  # embeddings multiplied by sqrt(d_model) (paper: yes; some imported models: no)
    output_bias: bool = False  # a bias on the pre-softmax layer (HF Marian's final_logits_bias; paper: none)

    def __post_init__(self) -> None:
        for name in ("d_model", "n_heads", "d_ff", "n_encoder_layers", "n_decoder_layers", "max_positions"):
            require(getattr(self, name) > 0, f"model.{name} must be positive, got {getattr(self, name)}")
        divides = f"model.d_model ({self.d_model}) must be divisible by model.n_heads ({self.n_heads})"
        require(self.d_model % self.n_heads == 0, divides)
        for name in ("dropout", "attention_dropout", "activation_dropout"):
            require(0.0 <= getattr(self, name) < 1.0, f"model.{name} must be in [0, 1), got {getattr(self, name)}")
        require(self.layer_norm_eps > 0, f"model.layer_norm_eps must be positive, got {self.layer_norm_eps}")


@dataclass(frozen=True, kw_only=True)
class SplitConfig:
    """One split of a corpus, exactly one kind of source. `KINDS`: kind -> (the fields that name it, its input
    paths, resolved against the config's folder; `dataset` too with from_disk); `transformer.data.corpus.READERS`
    reads each."""

    KINDS: ClassVar = {
        "parallel": (("src", "tgt"), ("src", "tgt")),
        "tsv": (("tsv",), ("tsv",)),
        "dataset": (("dataset",), ("data_files",)),
        "corpora": (("corpora",), ()),
    }
    src: str | None = None  # plain text file, one source sentence per line
    tgt: str | None = None  # plain text file, one target sentence per line, parallel to `src`
    tsv: str | None = None  # tab-separated file (plain, .gz or .xz)
    tsv_columns: tuple[int, int] = (0, 1)  # 0-based columns of the source and target in `tsv`
    dataset: str | None = None  # `datasets` name (hub or builder such as json/parquet) or a saved dataset path
    config: str | None = None  # `datasets` configuration name, e.g. "de-en" for wmt14
    split: str = "train"  # `datasets` split name
    data_files: str | list[str] | None = None  # files for a local builder (json, parquet, arrow, csv)
    from_disk: bool = False  # `dataset` is a directory written by `Dataset.save_to_disk`
    columns: tuple[str, str] | None = None  # `datasets` source and target text columns (default: `translation`)
    corpora: list[SplitConfig] | None = None  # several corpora, concatenated (each one a split of its own)
    weight: float = 1.0  # in `corpora`: times each pair is used per epoch (a fraction samples that share)
    max_examples: int | None = None  # keep only the first N pairs (for quick runs)

    def __post_init__(self) -> None:
        named, (*kinds, last) = self._kinds(), ["+".join(names) for names, _ in self.KINDS.values()]
        need = f"a data split needs exactly one of {', '.join(kinds)} or {last}"
        require(len(named) == 1, f"{need}, got {['/'.join(self.KINDS[k][0]) for k in named] or 'none'}")
        require(self.weight > 0, f"a corpus weight must be positive, got {self.weight}")
        require(self.columns is None or bool(self.dataset), "columns: [source, target] goes with a dataset source")
        require(bool(self.src) == bool(self.tgt), "a data split with `src` also needs `tgt` (and vice versa)")
        require(min(self.tsv_columns) >= 0, f"tsv_columns must be non-negative, got {self.tsv_columns}")
        require(self.max_examples is None or self.max_examples > 0, "max_examples must be positive")

    def _kinds(self) -> list[str]:  # the KINDS whose fields are set; `kind`: the one a valid split has (no YAML key)
        return [k for k, (names, _) in self.KINDS.items() if any(getattr(self, n) for n in names)]

    kind = property(lambda self: self._kinds()[0])


@dataclass(frozen=True, kw_only=True)
class SubwordSampling:
    """Subword regularization of the training split (docs/training.md): a SentencePiece unigram model samples a
    segmentation (Kudo 2018), a BPE model drops merges (BPE-dropout, Provilkov et al. 2020); epoch e trains on
    the cached segmentation e mod `segmentations`, each drawn from train.seed."""

    alpha: float  # unigram: the smoothing exponent of the sampling; BPE: the probability of dropping a merge
    segmentations: int = 8  # sampled copies of the training split kept in the cache (each as large as the split)

    def __post_init__(self) -> None:
        require(0 < self.alpha <= 1, f"data.subword_sampling.alpha must be in (0, 1], got {self.alpha}")
        require(self.segmentations >= 1, "data.subword_sampling.segmentations must be >= 1")


@dataclass(frozen=True, kw_only=True)
class DataConfig:
    src_lang: str = "en"  # source language code (the key in a `translation` column, the demo's label)
    tgt_lang: str = "de"  # target language code
    train: SplitConfig | None = None  # training pairs
    valid: SplitConfig | None = None  # validation pairs (loss, perplexity, BLEU during training)
    test: SplitConfig | None = None  # test pairs (transformer-evaluate's default)
    cache_dir: str = "cache"  # where the tokenizer and encoded splits are cached, keyed by a content hash
    vocab_size: int = 8000  # SentencePiece vocabulary size (paper: ~37k shared BPE for EN-DE)
    spm_model_type: Literal["bpe", "unigram"] = "bpe"  # SentencePiece algorithm
    joint_vocab: bool = True  # one SentencePiece model for source and target (the paper's shared vocabulary)
    spm_input_sentences: int = 2_000_000  # sentences sampled to train SentencePiece (0 = all)
    character_coverage: float = 1.0  # SentencePiece character coverage
    spm_byte_fallback: bool = False  # SentencePiece byte_fallback: characters outside the vocabulary as UTF-8 bytes
    max_tokens_per_sentence: int = 256  # drop training pairs with a side longer than this, in tokens
    max_length_ratio: float = 3.0  # drop training pairs whose token-length ratio exceeds this (0 = keep all)
    subword_sampling: SubwordSampling | None = None  # a sampled segmentation of the training split per epoch
    drop_copies: bool = False  # drop training pairs whose source equals their target (counted in the report)
    drop_duplicates: bool = False  # drop training pairs equal to an earlier one (a 64-bit hash: 8 bytes a pair)
    case_augmentation: float = 0.0  # share of training pairs also added in ALL CAPS or Title Case, both sides (0-1)
    num_proc: int = 1  # processes encoding the splits (one per 10k pairs at most)
    tokenizer: str | None = None  # an existing joint SentencePiece model file, used as it is (none trained)
    src_tokenizer: str | None = None  # existing source and target SentencePiece models (both or neither),
    tgt_tokenizer: str | None = None  # their pieces in one shared id table (the OPUS-MT layout)

    def __post_init__(self) -> None:
        require(self.src_lang != self.tgt_lang, "data.src_lang and data.tgt_lang must differ")
        require(self.vocab_size >= 16, f"data.vocab_size must be at least 16, got {self.vocab_size}")
        require(self.max_tokens_per_sentence > 0, "data.max_tokens_per_sentence must be positive")
        require(self.max_length_ratio >= 0, "data.max_length_ratio must be >= 0")
        require(0 < self.character_coverage <= 1, "data.character_coverage must be in (0, 1]")
        require(self.num_proc >= 1, "data.num_proc must be >= 1")
        share = self.case_augmentation
        require(0 <= share <= 1, f"data.case_augmentation is a share of the training pairs in [0, 1], got {share}")
        pair = "data.src_tokenizer and data.tgt_tokenizer go together (two models over one id table)"
        require((self.src_tokenizer is None) == (self.tgt_tokenizer is None), pair)
        one = "set data.tokenizer (one joint model) or data.src_tokenizer/tgt_tokenizer (two), not both"
        require(self.tokenizer is None or self.src_tokenizer is None, one)
        for name in ("train", "valid", "test"):
            split = getattr(self, name)
            ok = split is None or split.weight == 1.0
            require(ok, f"data.{name}.weight: a weight belongs to one corpus of a split's corpora: list")


@dataclass(frozen=True, kw_only=True)
class TrainConfig:
    out_dir: str = "runs/default"  # run directory: checkpoints, metrics.jsonl, config.yaml, curves.png
    seed: int = 1  # seeds python, numpy and torch; also fixes the batch order
    max_tokens: int = 4096  # padded tokens per micro-batch on one device: B x max(S, T), target side included
    update_tokens: int = 25000  # target tokens per optimizer update, summed over devices and accumulation
    accumulation: int = 0  # micro-batches per device per update (0 = derived from update_tokens)
    lr_schedule: Literal["noam", "inverse_sqrt"] = "noam"  # noam: the paper's; inverse_sqrt: fairseq-style
    lr_scale: float = 1.0  # noam: lr = lr_scale * d_model^-0.5 * min(step^-0.5, step * warmup^-1.5)
    lr: float = 5e-4  # inverse_sqrt: peak learning rate reached after warmup
    warmup_steps: int = 4000  # linear warmup, in updates
    adam_betas: tuple[float, float] = (0.9, 0.98)  # Adam beta1, beta2
    adam_eps: float = 1e-9  # Adam epsilon
    weight_decay: float = 0.0  # decoupled weight decay (AdamW); 0 = the paper's Adam
    clip_norm: float = 0.0  # clip the global gradient norm to this (0 = off)
    label_smoothing: float = 0.1  # epsilon_ls
    precision: Precision = "auto"  # autocast while training; auto: bf16 on a GPU that supports it, else fp32
    compile: bool = False  # wrap the model in torch.compile
    fused_loss: bool = True  # output layer + loss for the non-pad targets only, chunked (transformer.training.loss)
    length_buckets: bool = False  # pad batches to a few lengths (batching.LENGTH_BUCKETS): for compile on a GPU
    prefetch: int = 2  # micro-batches collated (on CUDA also pinned and copied) ahead on a thread (0 = none)
    threads: int = 0  # torch intra-op threads on CPU (0 = torch's default)
    max_steps: int = 100_000  # stop after this many updates (0 = no limit)
    max_epochs: int = 0  # stop after this many epochs (0 = no limit)
    max_time: str | None = None  # stop after this wall time, e.g. "90s", "12m", "2h" (None = no limit)
    log_every: int = 50  # updates between progress/metrics lines
    valid_every: int = 1000  # updates between validations (0 = only at the end)
    valid_bleu: bool = True  # greedy-decode the validation set and report BLEU at each validation
    valid_bleu_sentences: int = 500  # sentences of the validation set to decode for BLEU (0 = all)
    best_metric: Literal["bleu", "loss"] = "bleu"  # which validation metric selects best.pt
    patience: int = 0  # stop after this many validations without improvement (0 = never)
    save_every: int = 1000  # updates between checkpoints (0 = only at the end)
    save_every_minutes: float = 0.0  # also checkpoint after this many minutes (0 = off)
    keep_last: int = 5  # numbered checkpoints to keep (the paper averages the last 5)
    nan_patience: int = 5  # abort after this many consecutive updates with a non-finite loss or gradient
    init_from: str | None = None  # start a new run from this checkpoint's weights and tokenizer (fine-tuning)
    init_optimizer: bool = False  # with init_from: also take its optimizer state and update count (schedule)
    prepare_timeout: str = "6h"  # DDP: how long the other processes wait for rank 0 to prepare the data (duration)
    tensorboard: bool = False  # also log metrics to <out_dir>/tensorboard (needs the tensorboard package)
    confidence_lines: int = 1000  # validation pairs the final checkpoint's confidence is calibrated on (0 = none)

    def __post_init__(self) -> None:
        for name in ("max_tokens", "update_tokens", "log_every", "keep_last", "nan_patience"):
            require(getattr(self, name) > 0, f"train.{name} must be positive, got {getattr(self, name)}")
        for name in (
            "warmup_steps",
            "max_steps",
            "max_epochs",
            "valid_every",
            "save_every",
            "patience",
            "threads",
            "accumulation",
            "prefetch",
            "confidence_lines",
        ):
            require(getattr(self, name) >= 0, f"train.{name} must be >= 0, got {getattr(self, name)}")
        require(self.lr > 0 and self.lr_scale > 0, "train.lr and train.lr_scale must be positive")
        require(all(0 <= b < 1 for b in self.adam_betas), f"train.adam_betas must be in [0, 1), got {self.adam_betas}")
        require(0 <= self.label_smoothing < 1, f"train.label_smoothing must be in [0, 1), got {self.label_smoothing}")
        require(self.clip_norm >= 0 and self.weight_decay >= 0, "train.clip_norm and weight_decay must be >= 0")
        if self.max_time is not None:
            parse_duration(self.max_time)
        parse_duration(self.prepare_timeout)


@dataclass(frozen=True, kw_only=True)
class DecodeConfig:
    beam_size: int = 4  # K hypotheses kept per sentence (1 = greedy)
    length_penalty: Literal["gnmt", "fairseq", "none"] = "gnmt"  # gnmt: ((5+len)/6)^alpha; fairseq: len^alpha
    alpha: float = 0.6  # length penalty exponent
    max_len_a: float = 1.0  # maximum output length = max_len_a * source length + max_len_b
    max_len_b: int = 50
    min_len: int = 0  # EOS is forbidden before this many output tokens (and always before the first)
    no_repeat_ngram_size: int = 0  # no n-gram of output pieces twice in a hypothesis, n in pieces (0 = off)
    max_ngram_repeats: int = 2  # no n-gram of output pieces more often than this in a row, any n (0 = off)
    fold_capitals: bool = True  # translate a line in ALL CAPS in sentence case and upper-case its translation
    nbest: int = 1  # hypotheses returned per sentence
    constraint_beam_size: int = 10  # the beam of sentences with lexical constraints: max(beam_size, this)
    glossary_beam_size: int = 4  # the beam of sentences whose constraints are glossary terms only: max(beam_size, this)
    max_tokens: int = 8000  # padded source tokens per decoding batch, B x S (no target side; sorted by length)
    sampling: bool = False  # sample instead of searching (not in the paper)
    temperature: float = 1.0  # sampling temperature
    top_k: int = 0  # sample among the k most likely tokens (0 = all)
    top_p: float = 1.0  # sample among the smallest set with this probability mass
    precision: Precision = "fp32"  # autocast while decoding (fp32 by default: output independent of the GPU)
    cuda_graphs: bool = True  # on a CUDA device, one captured graph replayed per search step (decoding/graph_search.py)

    @property
    def search(self) -> Literal["sampling", "greedy", "beam"]:
        """The search these settings choose (derived here only): sampling, greedy (beam_size 1) or beam search."""
        return "sampling" if self.sampling else "greedy" if self.beam_size == 1 else "beam"

    def __post_init__(self) -> None:
        require(self.beam_size >= 1, f"decode.beam_size must be >= 1, got {self.beam_size}")
        require(1 <= self.nbest <= self.beam_size, f"decode.nbest must be in [1, beam_size], got {self.nbest}")
        require(
            self.constraint_beam_size >= 1, f"decode.constraint_beam_size must be >= 1, got {self.constraint_beam_size}"
        )
        require(self.glossary_beam_size >= 1, f"decode.glossary_beam_size must be >= 1, got {self.glossary_beam_size}")
        require(self.alpha >= 0 and self.min_len >= 0, "decode.alpha and decode.min_len must be >= 0")
        require(self.no_repeat_ngram_size >= 0, "decode.no_repeat_ngram_size must be >= 0 (0 = off)")
        require(self.max_ngram_repeats >= 0, "decode.max_ngram_repeats must be >= 0 (0 = off)")
        require(self.max_len_a >= 0 and self.max_len_b >= 0, "decode.max_len_a and max_len_b must be >= 0")
        require(self.max_tokens > 0, "decode.max_tokens must be positive")
        require(self.temperature > 0 and self.top_k >= 0, "decode.temperature must be > 0 and top_k >= 0")
        require(0 < self.top_p <= 1, f"decode.top_p must be in (0, 1], got {self.top_p}")


TOKENIZER_FILES = ("tokenizer", "src_tokenizer", "tgt_tokenizer")  # DataConfig's SentencePiece model paths
CHUNK_LINES = 1000  # input lines that transformer-translate and Translator.translate read (and sort) at a time


@dataclass(frozen=True, kw_only=True)
class Config:
    model: ModelConfig = field(default_factory=ModelConfig)
    data: DataConfig = field(default_factory=DataConfig)
    train: TrainConfig = field(default_factory=TrainConfig)
    decode: DecodeConfig = field(default_factory=DecodeConfig)

    def __post_init__(self) -> None:
        one_vocabulary = "model.share_embeddings needs data.joint_vocab: true (one vocabulary for both languages)"
        one_table = self.data.joint_vocab or self.data.src_tokenizer is not None  # two models, one id table
        require(not self.model.share_embeddings or one_table, one_vocabulary)

    def to_dict(self) -> dict[str, Any]:
        return _to_plain(dataclasses.asdict(self))

    def replace(self, section: str, **changes: Any) -> Config:
        """A copy with `changes` applied to one section, validated again."""
        return from_dict({**self.to_dict(), section: {**self.to_dict()[section], **changes}})


def _to_plain(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _to_plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_to_plain(v) for v in value]
    return value


def parse_duration(text: str) -> float:
    """'90s', '12m', '1.5h' or a bare number of seconds -> seconds."""
    match = re.fullmatch(r"\s*([0-9]*\.?[0-9]+)\s*([smh]?)\s*", str(text))
    if not match:
        raise ConfigError(f"bad duration {text!r}: use seconds, or a number with s, m or h, e.g. '12m'")
    return float(match[1]) * {"": 1, "s": 1, "m": 60, "h": 3600}[match[2]]


def from_dict(values: dict[str, Any]) -> Config:
    """A validated `Config` from a (possibly partial) nested mapping (keys of `REMOVED_KEYS` left out)."""
    return build(Config, without_removed(values or {}), "")


def without_removed(tree: dict[str, Any], warn: bool = False) -> dict[str, Any]:
    """`tree` less the keys of `REMOVED_KEYS`, each named in a warning when `warn`."""
    tree = dict(tree)
    for (section, key), why in REMOVED_KEYS.items():
        if isinstance(tree.get(section), dict) and key in tree[section]:
            tree[section] = {k: v for k, v in tree[section].items() if k != key}
            if warn:
                log.warning("warning: %s.%s is no longer a setting (%s); ignored", section, key, why)
    return tree
