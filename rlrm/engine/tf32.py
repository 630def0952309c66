"""TF32 for float32 matrix products on CUDA (`model.tf32`), in the processes that train the policy.

    previous = set_cuda_tf32(True)   # torch.backends.cuda.matmul.allow_tf32; the old value back
    ...
    set_cuda_tf32(previous)

An NVIDIA GPU from Ampere on runs a float32 matrix product on its tensor cores in TF32 (inputs rounded to 10
mantissa bits, sums in float32) several times faster than in plain float32: about 7x the rate on an H100 or H200
by the datasheet. PyTorch leaves it off for matrix products; HF's `TrainingArguments(tf32=True)` turns on this same
flag. It is CUDA's alone: on the CPU the products stay float32, and bf16 or float16 compute does not read it.
"""

from __future__ import annotations


def set_cuda_tf32(enabled: bool) -> bool:
    """Let CUDA's float32 matrix products run in TF32 (or not); returns the previous setting."""
    import torch

    previous = bool(torch.backends.cuda.matmul.allow_tf32)
    torch.backends.cuda.matmul.allow_tf32 = enabled
    return previous
