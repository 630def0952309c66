"""Prompt batches with a resumable cursor: each epoch is a seeded shuffle, so a resumed run sees
exactly the batches an uninterrupted one would."""

from __future__ import annotations

import random

from rlrm.engine.data.example import Example


class PromptLoader:
    """Endless batches of `batch_size` examples, reshuffled each epoch from `seed + epoch`."""

    def __init__(self, examples: list[Example], batch_size: int, shuffle: bool = True, seed: int = 0):
        if not examples:
            raise ValueError("PromptLoader needs at least one example")
        self.examples, self.batch_size, self.shuffle, self.seed = examples, batch_size, shuffle, seed
        self.epoch, self.cursor = 0, 0
        self._order = self._epoch_order(0)

    def _epoch_order(self, epoch: int) -> list[int]:
        order = list(range(len(self.examples)))
        if self.shuffle:
            random.Random(self.seed * 100_003 + epoch).shuffle(order)
        return order

    def next_batch(self) -> list[Example]:
        """The next batch; an epoch's tail shorter than a batch is carried into the next epoch."""
        batch: list[Example] = []
        while len(batch) < self.batch_size:
            if self.cursor >= len(self._order):
                self.epoch, self.cursor = self.epoch + 1, 0
                self._order = self._epoch_order(self.epoch)
            take = self._order[self.cursor : self.cursor + self.batch_size - len(batch)]
            self.cursor += len(take)
            batch.extend(self.examples[i] for i in take)
        return batch

    def state_dict(self) -> dict:
        return {"epoch": self.epoch, "cursor": self.cursor}

    def load_state_dict(self, state: dict) -> None:
        self.epoch, self.cursor = state["epoch"], state["cursor"]
        self._order = self._epoch_order(self.epoch)
