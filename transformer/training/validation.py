"""Validation and early stopping: loss, perplexity and greedy BLEU on the validation split, and the patience rule
that stops a run whose validation score has not improved for `train.patience` validations."""

from __future__ import annotations

import logging
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from tqdm import tqdm

from transformer.checkpoint import model_state, save_checkpoint
from transformer.config import Config
from transformer.precision import autocast
from transformer.training.distributed import any_rank
from transformer.training.loss import label_smoothed_loss
from transformer.training.plotting import plot_run

log = logging.getLogger(__name__)


@torch.no_grad()
def evaluate_loss(model, batches, *, precision: str, pad_id: int, epsilon: float) -> tuple[float, float]:
    """(label-smoothed loss, NLL) per target token over `batches`; the model is left in train mode."""
    model.eval()
    loss_sum = nll_sum = 0.0
    tokens = 0
    for batch in batches:
        with autocast(precision, batch.src.device):
            logits = model(batch.src, batch.tgt_in)  # (B, T, V)
        loss, nll = label_smoothed_loss(logits, batch.tgt_out, epsilon=epsilon, pad_id=pad_id)
        loss_sum, nll_sum, tokens = loss_sum + loss.item(), nll_sum + nll.item(), tokens + batch.n_tgt_tokens
    model.train()
    return loss_sum / max(tokens, 1), nll_sum / max(tokens, 1)


def validate(model, data, config: Config, precision: str, device: torch.device, progress: bool = False):
    """valid_loss, valid_nll, valid_ppl, and valid_bleu (greedy, on a sample) when configured."""
    from transformer.data.batching import TokenBatchSampler, collate

    split = data.splits["valid"]
    sampler = TokenBatchSampler(
        split.src_lengths, split.tgt_lengths, max_tokens=config.train.max_tokens, seed=0, shuffle=False
    )
    batches = (collate(split, indices, bos_id=data.tokenizer.bos_id).to(device) for indices in sampler)
    loss, nll = evaluate_loss(
        model, batches, precision=precision, pad_id=model.pad_id, epsilon=config.train.label_smoothing
    )
    record = {"valid_loss": loss, "valid_nll": nll, "valid_ppl": math.exp(min(nll, 50.0))}
    if config.train.valid_bleu and split.src_text is not None:
        from transformer.decoding.streaming import StreamingEngine
        from transformer.evaluation import corpus_scores

        n = config.train.valid_bleu_sentences or len(split)
        decode = config.replace("decode", beam_size=1, nbest=1, sampling=False).decode
        translator = StreamingEngine(model, data.tokenizer, decode, device=device, precision=precision)
        with tqdm(total=min(n, len(split)), desc="validation decoding", leave=False, disable=not progress) as bar:
            hypotheses = [r[0].text for r in translator.translate(split.src_text[:n], progress=bar.update)]
        record["valid_bleu"] = corpus_scores(hypotheses, list(split.tgt_text[:n]))["bleu"]
        model.train()
    return record


@dataclass
class EarlyStopping:
    """The best validation score so far (higher is better) and the validations since it last improved."""

    patience: int  # validations without improvement before stopping; 0 = never stop
    best_metric: str  # "bleu" (when measured) or "loss"
    best: float | None = None
    bad_validations: int = 0

    def score(self, record: dict[str, Any]) -> float:
        """valid_bleu when it is the chosen metric and was measured, else -valid_loss."""
        use_bleu = self.best_metric == "bleu" and "valid_bleu" in record
        return record["valid_bleu"] if use_bleu else -record["valid_loss"]

    def update(self, record: dict[str, Any]) -> tuple[bool, bool]:
        """Take one validation record; returns (improved, stop)."""
        value = self.score(record)
        if self.best is None or value > self.best:
            self.best, self.bad_validations = value, 0
            return True, False
        self.bad_validations += 1
        return False, bool(self.patience) and self.bad_validations >= self.patience


class Validator:
    """Validation at its points on rank 0: the record written (metrics.jsonl), the curves plotted, best.pt saved
    when the score improves, and the patience rule agreed between ranks."""

    def __init__(self, config: Config, setup, early_stopping: EarlyStopping, write, *, progress: bool) -> None:
        self.config, self.setup, self.early_stopping, self.write = config, setup, early_stopping, write
        self.is_main, self.progress, self.out_dir = setup.rank == 0, progress, Path(config.train.out_dir)

    def __call__(self, step: int) -> bool:
        """Validate the model at update `step`; True to stop (patience)."""
        stop, run = False, self.setup
        if self.is_main and "valid" in run.data.splits:
            record = {
                "step": step,
                **validate(run.model, run.data, self.config, run.precision, run.device, progress=self.progress),
            }
            self.write(record)
            plot_run(self.out_dir)
            log.info(
                "validation at update %d: %s", step, ", ".join(f"{k} {v:.4g}" for k, v in record.items() if k != "step")
            )
            improved, stop = self.early_stopping.update(record)
            if improved:
                save_checkpoint(
                    model_state(run.model, self.config, run.data.tokenizer, step=step, valid=record),
                    self.out_dir / "best.pt",
                )
        return any_rank(stop, run.device)
