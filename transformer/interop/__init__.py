"""Other engines' formats: our checkpoints exported to Hugging Face (Marian, Pegasus) and CTranslate2 with the decoding
settings each engine takes (engine_settings.py), Hugging Face Marian (OPUS-MT) directories imported as checkpoints,
and the one mapping of our model's config to Marian's fields that both (and the training benchmark's Marian peer)
use.

Imports the model, `transformer.data` (the tokenizer's ids), `transformer.decoding` (the run limit's file, which the
Hugging Face export ships), the checkpoint and the shared modules; `transformers`, `ctranslate2` and `safetensors`
only inside the functions that need them (the `export` extra).
"""
