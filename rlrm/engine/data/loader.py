"""Prompt batches with a resumable cursor: each epoch is a seeded shuffle, so a resumed run sees
exactly the batches an uninterrupted one would.

A batch that crosses into the next epoch takes the next epoch's first prompts that it does not
already hold (those are moved just after them): one step never trains one prompt as two groups,
while every epoch still holds each prompt once. Only a train split smaller than a batch repeats
prompts within a step (said when the run starts).
"""

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
        self._order = self._epoch_order(0, [])

    def _epoch_order(self, epoch: int, previous: list[int]) -> list[int]:
        """Epoch `epoch`'s order, given the previous epoch's (its tail shares a batch with this one's head)."""
        order = list(range(len(self.examples)))
        if self.shuffle:
            random.Random(self.seed * 100_003 + epoch).shuffle(order)
        carried = (epoch * len(order)) % self.batch_size  # the previous epoch's prompts in the crossing batch
        if not carried or not previous:
            return order
        held = set(previous[-carried:])
        head = [i for i in order if i not in held][: self.batch_size - carried]
        if len(head) < self.batch_size - carried:  # a split smaller than a batch: repeats cannot be avoided
            return order
        taken = set(head)
        return head + [i for i in order if i not in taken]

    def next_batch(self) -> list[Example]:
        """The next batch; an epoch's tail shorter than a batch is carried into the next epoch."""
        batch: list[Example] = []
        while len(batch) < self.batch_size:
            if self.cursor >= len(self._order):
                self.epoch, self.cursor = self.epoch + 1, 0
                self._order = self._epoch_order(self.epoch, self._order)
            take = self._order[self.cursor : self.cursor + self.batch_size - len(batch)]
            self.cursor += len(take)
            batch.extend(self.examples[i] for i in take)
        return batch

    def state_dict(self) -> dict:
        return {"epoch": self.epoch, "cursor": self.cursor}

    def load_state_dict(self, state: dict) -> None:
        self.epoch, self.cursor = state["epoch"], state["cursor"]
        order: list[int] = []
        for epoch in range(self.epoch + 1):  # each epoch's order follows from the one before it
            order = self._epoch_order(epoch, order)
        self._order = order
