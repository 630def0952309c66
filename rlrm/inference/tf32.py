"""TF32 for float32 matrix products on CUDA (`model.tf32`), in the processes that train the policy.

    put_back = cuda_tf32_on()   # CUDA's float32 matrix products in TF32 from here on
    ...
    put_back()                  # the process's own setting again

An NVIDIA GPU from Ampere on runs a float32 matrix product on its tensor cores in TF32 (inputs rounded to 10
mantissa bits, sums in float32) several times faster than in plain float32: about 7x the rate on an H100 or H200
by the datasheet. PyTorch leaves it off for matrix products; HF's `TrainingArguments(tf32=True)` turns on this same
setting. It is CUDA's alone: on the CPU the products stay float32, and bf16 or float16 compute does not read it.
Where `model.tf32` is false nothing is touched: the process keeps its own setting (torch's default: off).
"""

from __future__ import annotations

from typing import Callable


def cuda_tf32_on() -> Callable[[], None]:
    """Let CUDA's float32 matrix products run in TF32; returns the function that puts the previous setting back.

    Set through the older `allow_tf32` flag, which from torch 2.9 on sets the newer
    `torch.backends.cuda.matmul.fp32_precision` too and keeps the two readable. Setting only the newer one makes
    `torch.get_float32_matmul_precision()` raise ("a mix of the legacy and new APIs"), and TorchInductor reads it
    when it compiles a matrix product: every compiled decoding step would fail over to eager. A process that set
    the newer API itself (the older flag then raises when read) keeps to it.
    """
    import torch

    matmul = torch.backends.cuda.matmul
    try:
        previous = matmul.allow_tf32
    except RuntimeError:  # this process set fp32_precision itself: the older flag cannot be read
        before = matmul.fp32_precision
        matmul.fp32_precision = "tf32"
        return lambda: setattr(matmul, "fp32_precision", before)
    before = getattr(matmul, "fp32_precision", None)  # "none" until set: the older flag's False leaves "ieee"
    matmul.allow_tf32 = True

    def put_back() -> None:
        matmul.allow_tf32 = previous
        if before is not None:
            matmul.fp32_precision = before

    return put_back


def precision(dtype: object, device: object) -> object:
    """What code computing in `dtype` on `device` computes in, in this process: "tf32" for float32 on CUDA while
    CUDA's float32 products run in TF32 here (`model.tf32`), else `dtype` itself. rlrm/engine/behaviour.py compares
    the rollout engine's with the actor's: TF32 moves log-probs by more than float32's rounding."""
    import torch

    if dtype != torch.float32 or torch.device(device).type != "cuda":  # type: ignore[call-overload]
        return dtype
    matmul = torch.backends.cuda.matmul
    on = matmul.fp32_precision == "tf32" if hasattr(matmul, "fp32_precision") else matmul.allow_tf32
    return "tf32" if on else dtype
