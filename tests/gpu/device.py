"""The device the gpu tier runs on: cuda; RLRM_GPU_TIER_DEVICE=cpu runs the tier's code on the CPU instead, to
check the tests themselves on a machine without a GPU (the numbers then compare the CPU with itself)."""

import os

DEVICE = os.environ.get("RLRM_GPU_TIER_DEVICE", "cuda")
