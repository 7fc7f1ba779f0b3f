"""Which device to run on, what it is called (in every results file), and the process-wide CUDA settings that
training and decoding share."""

from __future__ import annotations

import os
import platform
import re
from pathlib import Path

import torch

from transformer.errors import UserError


def pick_device(name: str | None = None) -> torch.device:
    """None or "auto": CUDA when present, else CPU; otherwise the named device, checked to exist."""
    if name in (None, "auto"):
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    try:
        device = torch.device(name)
    except RuntimeError:
        raise UserError(f"unknown device {name!r}: use cpu, cuda, cuda:N or auto") from None
    if device.type == "cuda" and not torch.cuda.is_available():
        raise UserError(f"device {name} requested but CUDA is not available here; use --device cpu")
    return device


def cpu_model(cpuinfo: str | None = None) -> str:
    """'AMD EPYC 9R14, family 25 model 17, AVX-512': /proc/cpuinfo's model name (else what `platform` knows) and,
    where cpuinfo has them, the family and model numbers (which tell CPU generations apart under one name: AMD EPYC Zen
    1 to 5 all say 'AMD EPYC' on some clouds) and the widest vector instructions (AVX-512, AVX2 or neither), which CPU
    speed figures depend on. `cpuinfo`: the file's text (default: read it)."""
    if cpuinfo is None:
        path = Path("/proc/cpuinfo")
        cpuinfo = path.read_text(errors="replace") if path.is_file() else ""
    first = cpuinfo.split("\n\n", 1)[0]  # the first processor's block
    fields = dict(re.findall(r"^(model name|cpu family|model|flags)\s*:\s*(.*)$", first, re.MULTILINE))
    parts = [fields.get("model name", "").strip() or platform.processor() or platform.machine() or "unknown model"]
    if "cpu family" in fields and "model" in fields:
        parts.append(f"family {fields['cpu family'].strip()} model {fields['model'].strip()}")
    if "flags" in fields:
        flags = set(fields["flags"].split())
        parts.append("AVX-512" if "avx512f" in flags else "AVX2" if "avx2" in flags else "no AVX2")
    return ", ".join(parts)


def cpu_name() -> str:
    """'2-core CPU (AMD EPYC, family 25 model 1, AVX2)': the cores this process may use and `cpu_model()`."""
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    return f"{cores}-core CPU ({cpu_model()})"


def device_name(cuda: bool | None = None) -> str:
    """The GPU's name as torch reports it ('NVIDIA H100 80GB HBM3') when `cuda` (None: when there is one), else
    `cpu_name()`."""
    if cuda is None:
        cuda = torch.cuda.is_available()
    return torch.cuda.get_device_name(0) if cuda else cpu_name()


def avoid_cudnn_attention() -> None:
    """Keep `F.scaled_dot_product_attention` on CUDA off cuDNN's kernel (flash / memory-efficient kernels instead).

    cuDNN's attention builds an execution plan for every new shape, tens of milliseconds each. Training batches vary
    in length and incremental decoding grows the key length each step, so nearly every call paid it (a base-model
    update with and without: docs/benchmarks.md#training-throughput-on-one-h100-bf16).
    """
    if hasattr(torch.backends.cuda, "enable_cudnn_sdp"):
        torch.backends.cuda.enable_cudnn_sdp(False)


# What a CUDA allocation that does not fit raises; torch >= 2.5 also names it torch.OutOfMemoryError (the same class)
OutOfMemoryError: type[RuntimeError] = getattr(torch, "OutOfMemoryError", torch.cuda.OutOfMemoryError)


def out_of_memory(exc: BaseException, what: str, fix: str) -> UserError:
    """One line for an `OutOfMemoryError` caught where the work ran: what ran (the batch's size), the size torch
    failed to allocate, and the setting to lower."""
    tried = re.search(r"[Tt]ried to allocate ([\d.]+ \w+)", str(exc))
    return UserError(f"out of GPU memory {what}{f' (tried to allocate {tried[1]})' if tried else ''}: {fix}")
