"""Data: SentencePiece tokenization, reading corpora (files, TSV, `datasets`), encoding into a memory-mapped cache,
token-bucketed batching (paper section 5.1), and sampled segmentations of the training split (subword
regularization).

Imports the shared modules (config, errors, fileio, paths, progress) only: nothing of the model, training or
decoding.
"""
