"""The original "Attention Is All You Need" encoder-decoder Transformer for translation, in PyTorch."""

from transformer.config import Config, DataConfig, DecodeConfig, ModelConfig, TrainConfig, load_config
from transformer.errors import UserError

__version__ = "0.1.0"

__all__ = ["Config", "DataConfig", "DecodeConfig", "ModelConfig", "TrainConfig", "UserError", "load_config"]
