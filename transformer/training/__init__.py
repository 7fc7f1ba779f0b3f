"""Training (paper section 5): the label-smoothed loss, Adam and the learning-rate schedule, the update loop with
accumulation, mixed precision and DDP, validation and early stopping, logging, curves, recipes and time budgets, and
sequence-level distillation (a teacher's translations of a corpus, in resumable chunks, filtered, for a student).

Imports the model, data, decoding (validation BLEU) and the shared modules: nothing of the commands.
"""
