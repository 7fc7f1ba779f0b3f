"""corpus.py: reading pairs from every source kind (parallel files, TSV, `datasets`), several corpora, errors."""

from __future__ import annotations

import gzip
import json
import lzma
import os
from pathlib import Path

import pytest

from transformer.config import ConfigError, DataConfig, SplitConfig, load_config
from transformer.data import corpus
from transformer.data.corpus import input_files, load_pairs, stream_pairs
from transformer.errors import UserError

ROOT = Path(__file__).resolve().parents[1]
BIBLE = ROOT / "data" / "bible-es-en"
LANGS = DataConfig(src_lang="es", tgt_lang="en")
PAIRS = (
    ["Hola mundo.", "¿Dónde está la biblioteca?", "Él fué á la ciudad", "  espacios  ", "x"],
    ["Hello world.", "Where is the library?", "He went to the city", "spaces", "y z"],
)


@pytest.fixture(autouse=True)
def hf_cache(tmp_path, monkeypatch):
    """Keep the `datasets` builder cache inside the test's folder."""
    import datasets

    monkeypatch.setattr(datasets.config, "HF_DATASETS_CACHE", tmp_path / "hf")


def _write(path: Path, text: str) -> Path:
    opener = {".gz": gzip.open, ".xz": lzma.open}.get(path.suffix, open)
    with opener(path, "wt", encoding="utf-8") as f:
        f.write(text)
    return path


def _translation_rows(src, tgt, extra=None):
    return [{"translation": {"es": s, "en": t, **(extra or {})}} for s, t in zip(src, tgt)]


def make_source(kind: str, folder: Path, src: list[str], tgt: list[str]) -> SplitConfig:
    """Write the pairs as one kind of source and return the split config that reads them."""
    if kind == "parallel":
        _write(folder / "a.es", "\n".join(src) + "\n"), _write(folder / "a.en", "\n".join(tgt) + "\n")
        return SplitConfig(src=str(folder / "a.es"), tgt=str(folder / "a.en"))
    if kind.startswith("tsv"):
        suffix = kind.removeprefix("tsv")
        rows = [f"ref{i}\t{s}\t{t}\textra" for i, (s, t) in enumerate(zip(src, tgt))]
        path = _write(folder / f"a.tsv{suffix}", "\n".join(rows))  # no final newline
        return SplitConfig(tsv=str(path), tsv_columns=(1, 2))
    if kind == "json":
        lines = [json.dumps(row, ensure_ascii=False) for row in _translation_rows(src, tgt, {"fr": "-"})]
        path = _write(folder / "a.jsonl", "\n".join(lines) + "\n")
        return SplitConfig(dataset="json", data_files=str(path), split="train")
    import datasets

    features = datasets.Features({"translation": datasets.Translation(languages=["en", "es"])})
    ds = datasets.Dataset.from_list(_translation_rows(src, tgt), features=features)
    if kind == "from_disk_dict":
        ds = datasets.DatasetDict({"validation": ds})
    ds.save_to_disk(str(folder / "saved"))
    return SplitConfig(dataset=str(folder / "saved"), from_disk=True, split="validation")


KINDS = ["parallel", "tsv", "tsv.gz", "tsv.xz", "json", "from_disk", "from_disk_dict"]


@pytest.mark.parametrize("kind", KINDS)
def test_every_source_kind_loads_the_same_pairs(kind, tmp_path):
    split = make_source(kind, tmp_path, *PAIRS)
    expected = ([s.strip() for s in PAIRS[0]], PAIRS[1])
    assert load_pairs(split, LANGS) == expected


@pytest.mark.parametrize("kind", ["parallel", "tsv.xz", "json", "from_disk"])
def test_max_examples_keeps_the_first_pairs(kind, tmp_path):
    split = make_source(kind, tmp_path, *PAIRS)
    limited = SplitConfig(**{**vars(split), "max_examples": 2})
    assert load_pairs(limited, LANGS) == (PAIRS[0][:2], PAIRS[1][:2])


@pytest.mark.parametrize("block_bytes", [7, 64, 1 << 20])
@pytest.mark.parametrize("size", [1, 3, 50])
@pytest.mark.parametrize("limit", [None, 4, 29, 40])
def test_chunks_are_the_lines_sliced_at_any_block_and_chunk_size(block_bytes, size, limit, tmp_path, monkeypatch):
    """Lines read in blocks of a few bytes (so blocks cut lines and chunks cut blocks) come out as plain slicing
    of the whole files gives them."""
    monkeypatch.setattr(corpus, "BLOCK_BYTES", block_bytes)
    src = [f"uno {i} " + "x" * (i % 7) for i in range(30)]
    tgt = [f"one {i}" if i % 5 else "-" for i in range(30)]
    _write(tmp_path / "a.es", "\n".join(src) + "\n"), _write(tmp_path / "a.en", "\n".join(tgt))  # no last newline
    _write(tmp_path / "a.tsv", "".join(f"{s}\t{t}\n" for s, t in zip(src, tgt)))
    n = min(limit or 30, 30)
    files = [{"src": str(tmp_path / "a.es"), "tgt": str(tmp_path / "a.en")}, {"tsv": str(tmp_path / "a.tsv")}]
    for fields in files:
        split = SplitConfig(**fields, max_examples=limit)
        chunks = list(stream_pairs(split, LANGS, size))
        assert chunks == [([x.strip() for x in src[i:n][:size]], tgt[i:n][:size]) for i in range(0, n, size)]


def test_parallel_files_of_different_lengths_in_a_later_chunk(tmp_path, monkeypatch):
    monkeypatch.setattr(corpus, "BLOCK_BYTES", 16)
    _write(tmp_path / "a.es", "u\n" * 23), _write(tmp_path / "a.en", "o\n" * 31)
    split = SplitConfig(src=str(tmp_path / "a.es"), tgt=str(tmp_path / "a.en"))
    with pytest.raises(UserError, match="a.es has 23 lines, .*a.en has 31"):
        list(stream_pairs(split, LANGS, 5))


def test_the_bundled_corpus_is_intact():
    for name, rows in [("dev", 784), ("test", 1635), ("short/dev", 304)]:
        src, tgt = load_pairs(SplitConfig(tsv=str(BIBLE / f"{name}.tsv.xz"), tsv_columns=(1, 2)), LANGS)
        assert len(src) == len(tgt) == rows and all(src) and all(tgt)
    for name in ("bible_es_en", "demo"):
        config = load_config(ROOT / "configs" / f"{name}.yaml")
        for split in (config.data.train, config.data.valid, config.data.test):
            assert (ROOT / split.tsv).is_file() and split.tsv_columns == (1, 2)


# ---------------------------------------------------------------------------------------------- errors


def _error(split: SplitConfig, data: DataConfig = LANGS) -> str:
    with pytest.raises(UserError) as info:
        load_pairs(split, data)
    message = str(info.value)
    assert "\n" not in message
    return message


def test_missing_file(tmp_path):
    assert str(tmp_path / "nope.tsv") in _error(SplitConfig(tsv=str(tmp_path / "nope.tsv")))
    assert "nope.jsonl" in _error(SplitConfig(dataset="json", data_files=str(tmp_path / "nope.jsonl")))
    assert "saved dataset not found" in _error(SplitConfig(dataset=str(tmp_path / "nope"), from_disk=True))


def test_parallel_files_of_different_lengths(tmp_path):
    _write(tmp_path / "a.es", "uno\ndos\ntres\n"), _write(tmp_path / "a.en", "one\ntwo\n")
    message = _error(SplitConfig(src=str(tmp_path / "a.es"), tgt=str(tmp_path / "a.en")))
    assert "a.es has 3 lines" in message and "a.en has 2" in message


@pytest.mark.parametrize("kind", ["parallel", "tsv", "tsv.xz"])
def test_empty_corpus(kind, tmp_path):
    split = make_source(kind, tmp_path, [], [])
    assert "is empty" in _error(split)


@pytest.mark.parametrize("suffix", ["", ".gz"])
def test_undecodable_utf8_names_the_line(suffix, tmp_path):
    path = tmp_path / f"bad.tsv{suffix}"
    opener = gzip.open if suffix else open
    with opener(path, "wb") as f:
        f.write("a\tb\nc\td\né\t\xff\n".encode() + b"e\t\xff\n")
    assert f"{path} line 4 is not valid UTF-8" in _error(SplitConfig(tsv=str(path)))
    assert f"{path} line 4 is not valid UTF-8" in _error(SplitConfig(tsv=str(path), max_examples=10))


def test_tsv_line_without_enough_columns(tmp_path):
    _write(tmp_path / "a.tsv", "r\tuno\tone\nr\tdos\n")
    assert "line 2 has 2 tab-separated column(s)" in _error(
        SplitConfig(tsv=str(tmp_path / "a.tsv"), tsv_columns=(1, 2))
    )


@pytest.mark.parametrize("kind", ["json", "from_disk"])
def test_unknown_language_key(kind, tmp_path):
    split = make_source(kind, tmp_path, *PAIRS)
    message = _error(split, DataConfig(src_lang="es", tgt_lang="de"))
    assert "language 'de'" in message and "en" in message and "es" in message


def test_missing_split_and_missing_translation_column(tmp_path):
    split = make_source("from_disk_dict", tmp_path, *PAIRS)
    assert "not 'train'" in _error(SplitConfig(**{**vars(split), "split": "train"}))
    _write(tmp_path / "b.jsonl", '{"text": "hola"}\n')
    assert "no 'translation' column" in _error(SplitConfig(dataset="json", data_files=str(tmp_path / "b.jsonl")))


def test_unreachable_hub_is_a_user_error(monkeypatch):
    import datasets

    def offline(*args, **kwargs):
        raise ConnectionError("Couldn't reach 'wmt14' on the Hub (LocalEntryNotFoundError)")

    monkeypatch.setattr(datasets, "load_dataset", offline)
    message = _error(SplitConfig(dataset="wmt14", config="de-en", split="train"))
    assert "could not load dataset wmt14 de-en split=train" in message and "offline?" in message


# ---------------------------------------------------------------------------------- several corpora, columns, offline


def test_flat_columns_through_a_column_mapping(tmp_path):
    rows = [{"id": i, "es_text": s, "en_text": t} for i, (s, t) in enumerate(zip(*PAIRS))]
    path = _write(tmp_path / "flat.jsonl", "\n".join(json.dumps(r, ensure_ascii=False) for r in rows) + "\n")
    split = SplitConfig(dataset="json", data_files=str(path), columns=("es_text", "en_text"))
    assert load_pairs(split, LANGS) == ([s.strip() for s in PAIRS[0]], PAIRS[1])
    assert "no column 'de_text'" in _error(SplitConfig(**{**vars(split), "columns": ("es_text", "de_text")}))
    with pytest.raises(ConfigError, match="columns: \\[source, target\\] goes with a dataset"):
        SplitConfig(tsv="x.tsv", columns=("a", "b"))


def test_several_corpora_are_concatenated_with_weights(tmp_path):
    (tmp_path / "p").mkdir(), (tmp_path / "t").mkdir()
    parallel = make_source("parallel", tmp_path / "p", PAIRS[0][:2], PAIRS[1][:2])
    tsv = make_source("tsv", tmp_path / "t", PAIRS[0][2:], PAIRS[1][2:])
    both = SplitConfig(corpora=[parallel, tsv])
    assert load_pairs(both, LANGS) == ([s.strip() for s in PAIRS[0]], PAIRS[1])
    weighted = SplitConfig(corpora=[SplitConfig(**{**vars(parallel), "weight": 2.0}), tsv])
    src, _ = load_pairs(weighted, LANGS)
    assert src == [*PAIRS[0][:2], *PAIRS[0][:2], *[s.strip() for s in PAIRS[0][2:]]]  # the first corpus twice
    half = SplitConfig(corpora=[parallel, SplitConfig(**{**vars(tsv), "weight": 1.0 / 3})])
    src, tgt = load_pairs(half, LANGS)
    assert len(src) == 3 and src[:2] == PAIRS[0][:2] and tgt[2] in PAIRS[1][2:]  # one of the three tsv pairs
    assert load_pairs(half, LANGS) == (src, tgt)  # the sample is seeded
    with pytest.raises(ConfigError, match="weight must be positive"):
        SplitConfig(tsv="x", weight=0.0)


def test_several_corpora_from_a_config_file(tmp_path):
    make_source("tsv", tmp_path, *PAIRS)
    (tmp_path / "cfg").mkdir()
    text = (
        "data: {src_lang: es, tgt_lang: en, train: {corpora: [{tsv: ../a.tsv, tsv_columns: [1, 2]}, "
        "{tsv: ../a.tsv, tsv_columns: [1, 2], weight: 0.4}]}}\n"
    )
    config = load_config(_write(tmp_path / "cfg" / "c.yaml", text))
    src, _ = load_pairs(config.data.train, config.data)
    assert len(src) == 5 + 2 and config.data.train.corpora[0].tsv == str(tmp_path / "a.tsv")


def test_unreachable_hub_fails_fast_offline(monkeypatch):
    """Without a network, loading goes offline at once (HF_HUB_OFFLINE) instead of retrying for 25 s."""
    from huggingface_hub import constants

    import transformer.data.datasets_source as source

    monkeypatch.setattr(source, "hub_reachable", lambda timeout=3.0: False)
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", False)
    seen = []
    real = __import__("datasets").load_dataset

    def load(*args, **kwargs):
        seen.append(constants.HF_HUB_OFFLINE)
        return real(*args, **kwargs)

    monkeypatch.setattr("datasets.load_dataset", load)
    message = _error(SplitConfig(dataset="no-such-owner/no-such-dataset", split="train"))
    assert seen == [True] and constants.HF_HUB_OFFLINE is False  # offline while loading, restored after
    assert "could not load dataset no-such-owner/no-such-dataset" in message and "offline?" in message


# The cache identity of a few splits, as `split_identity` wrote it at commit f86f508 (before the source kinds moved
# into one registry): encoded-data caches are keyed by it, so a change here silently re-encodes every user's corpora.
# Each digest is sha256 of the identity as JSON (sorted keys, as `transformer.data.prepare._hash` writes it), the
# test folder written as TMP; files get fixed sizes and mtimes so that the digest depends on nothing else.
IDENTITIES = {
    "parallel": (dict(src="a.es", tgt="a.en", max_examples=3), "2d81b1620393b822"),
    "tsv": (dict(tsv="a.tsv", tsv_columns=(1, 0)), "f1ed07e89a1c9200"),
    "dataset": (
        dict(dataset="json", data_files=["a.jsonl", "https://x/y.jsonl", "b*.jsonl"], columns=("es", "en")),
        "792bb4a227413e99",
    ),
    "hub": (dict(dataset="wmt14", config="de-en", split="validation"), "a8c0dc28a1e69c93"),
    "from_disk": (dict(dataset="saved", from_disk=True, split="test"), "af41753d1d3a1a3a"),
    "corpora": (dict(corpora=[dict(tsv="a.tsv"), dict(src="a.es", tgt="a.en", weight=2.5)]), "ef95d7d67c298969"),
}


def _in(folder: Path, fields: dict) -> SplitConfig:
    def path(value):
        if isinstance(value, list):
            return [path(v) for v in value]
        return str(folder / value) if "/" not in value and "*" not in value else value

    fields = dict(fields)
    for key in ("src", "tgt", "tsv", "data_files"):
        if key in fields:
            fields[key] = path(fields[key])
    if fields.get("from_disk"):
        fields["dataset"] = path(fields["dataset"])
    if "corpora" in fields:
        fields["corpora"] = [_in(folder, c) for c in fields["corpora"]]
    return SplitConfig(**fields)


@pytest.mark.parametrize("kind", IDENTITIES)
def test_split_identity_is_unchanged(kind, tmp_path):
    import hashlib

    from transformer.data.corpus import split_identity

    (tmp_path / "saved").mkdir()
    files = {"a.es": "hola\n", "a.en": "hello\n", "a.tsv": "hola\thello\n", "a.jsonl": "{}\n", "saved/d.arrow": "xy"}
    for name, text in files.items():
        (tmp_path / name).write_text(text)
        os.utime(tmp_path / name, ns=(1_700_000_000_000_000_000,) * 2)
    fields, digest = IDENTITIES[kind]
    text = json.dumps(split_identity(_in(tmp_path, fields)), sort_keys=True, default=str)
    assert hashlib.sha256(text.replace(str(tmp_path), "TMP").encode()).hexdigest()[:16] == digest


@pytest.mark.parametrize(
    ("source", "kind"), [("parallel", "parallel"), ("tsv.gz", "tsv"), ("json", "dataset"), ("from_disk", "dataset")]
)
def test_kind_is_derived_from_the_fields_set(source, kind, tmp_path):
    split = make_source(source, tmp_path, *PAIRS)
    assert split.kind == kind and SplitConfig(corpora=[split]).kind == "corpora"


def test_input_files_name_every_local_input_corpora_included(tmp_path):
    """Evaluate's outputs-are-not-inputs check reads these: each kind's own files, then each corpus's."""
    tsv, jsonl, saved = (str(tmp_path / n) for n in ("a.tsv", "a.jsonl", "saved"))
    split = SplitConfig(
        corpora=[
            SplitConfig(tsv=tsv),
            SplitConfig(dataset="json", data_files=[jsonl, "https://host/b.jsonl", "c*.jsonl"]),
            SplitConfig(corpora=[SplitConfig(src="x.es", tgt="x.en"), SplitConfig(dataset=saved, from_disk=True)]),
            SplitConfig(dataset="wmt14", config="de-en"),
        ]
    )
    assert input_files(split) == [tsv, jsonl, "x.es", "x.en", saved]
