"""The paper's model (sections 3.1-3.5) in plain PyTorch: attention, embeddings, layers, the encoder-decoder.

Offers `Transformer` (training interface `forward`/`encode`/`decode`, decoding interface `encode`/`decode_step`),
its parts, and the decoder's key/value cache (`cache.py`: `init_cache(model, ...)`), which the model's own files
do not import. Imports only torch, math and `transformer.config`: nothing of data, training or decoding.
"""

from transformer.model.transformer import Transformer, count_parameters

__all__ = ["Transformer", "count_parameters"]
