"""The original "Attention Is All You Need" encoder-decoder Transformer for translation, in PyTorch."""

from transformer.config import Config, DataConfig, DecodeConfig, ModelConfig, TrainConfig, load_config
from transformer.errors import UserError

__version__ = "0.1.0"

__all__ = [
    "Config",
    "DataConfig",
    "DecodeConfig",
    "Glossary",
    "ModelConfig",
    "Protection",
    "TrainConfig",
    "Translator",
    "UserError",
    "load_config",
]


def __getattr__(name: str):
    """`from transformer import Translator` loads torch only when asked for (the CLI imports this package)."""
    if name == "Translator":
        from transformer.api import Translator

        return Translator
    if name == "Glossary":
        from transformer.decoding.glossary import Glossary

        return Glossary
    if name == "Protection":
        from transformer.documents.spans import Protection

        return Protection
    raise AttributeError(f"module 'transformer' has no attribute {name!r}")
