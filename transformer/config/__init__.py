"""Configuration: the sections (frozen dataclasses, the only defaults, validated on construction) in sections.py
(transformer-serve's and transformer-distill's in tools.py), and config files (YAML, `base:` chains, `--set
section.key=value` overrides, atomic writing) in files.py. YAML files may be partial. Every problem is raised as
`ConfigError`, which the command-line tools print as one line.

Imports errors, typecheck, fileio and paths only, and no torch, so it loads instantly and any tool can use it.
"""

from transformer.config.files import load_config, save_config, set_dotted
from transformer.config.sections import (
    CHUNK_LINES,
    PRECISIONS,
    REMOVED_KEYS,
    TOKENIZER_FILES,
    Config,
    DataConfig,
    DecodeConfig,
    ModelConfig,
    Precision,
    SplitConfig,
    SubwordSampling,
    TrainConfig,
    choices,
    from_dict,
    parse_duration,
)
from transformer.config.tools import DistillConfig, ServeConfig
from transformer.errors import ConfigError

__all__ = [
    "CHUNK_LINES",
    "PRECISIONS",
    "REMOVED_KEYS",
    "TOKENIZER_FILES",
    "Config",
    "ConfigError",
    "DataConfig",
    "DecodeConfig",
    "DistillConfig",
    "ModelConfig",
    "Precision",
    "ServeConfig",
    "SplitConfig",
    "SubwordSampling",
    "TrainConfig",
    "choices",
    "from_dict",
    "load_config",
    "parse_duration",
    "save_config",
    "set_dotted",
]
