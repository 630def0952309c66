"""One prompt of a dataset, in the shape every loader produces."""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True)
class Example:
    uid: str  # stable id, e.g. "synthetic/train/17" or "gsm8k/test/3"
    prompt: list[dict]  # chat messages
    ground_truth: str
    data_source: str
    extra_info: dict = field(default_factory=dict)
