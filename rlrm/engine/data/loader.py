"""Prompt batches with a resumable cursor: each epoch is a seeded shuffle, so a resumed run sees
exactly the batches an uninterrupted one would.

A batch that crosses into the next epoch takes the next epoch's first prompts that it does not
already hold (those are moved just after them): one step never trains one prompt as two groups,
while every epoch still holds each prompt once. Only a train split smaller than a batch repeats
prompts within a step (said when the run starts). The prompts so moved to the epoch's front are
kept in the state (`head`), so a resume rebuilds the epoch's order whatever its batch size.
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
        self.head: list[int] = []  # this epoch's prompts put first (see the module docstring)
        self._order = self._epoch_order(0, [])

    def _epoch_order(self, epoch: int, head: list[int]) -> list[int]:
        """Epoch `epoch`'s seeded shuffle, with `head` first."""
        order = list(range(len(self.examples)))
        if self.shuffle:
            random.Random(self.seed * 100_003 + epoch).shuffle(order)
        first = set(head)
        return [*head, *(i for i in order if i not in first)]

    def _head(self, order: list[int], carried: list[int]) -> list[int]:
        """The first prompts of `order` a batch that holds `carried` takes, none of them in it; [] (the order as it is)
        when nothing was carried or too few prompts are left (a split smaller than a batch)."""
        room = self.batch_size - len(carried)
        held = set(carried)
        head = [i for i in order if i not in held][: max(room, 0)]
        return head if carried and room > 0 and len(head) == room else []

    def next_batch(self) -> list[Example]:
        """The next batch; an epoch's tail shorter than a batch is carried into the next epoch."""
        batch: list[int] = []
        while len(batch) < self.batch_size:
            if self.cursor >= len(self._order):
                self.epoch, self.cursor = self.epoch + 1, 0
                self.head = self._head(self._epoch_order(self.epoch, []), batch)
                self._order = self._epoch_order(self.epoch, self.head)
            take = self._order[self.cursor : self.cursor + self.batch_size - len(batch)]
            self.cursor += len(take)
            batch.extend(take)
        return [self.examples[i] for i in batch]

    def state_dict(self) -> dict:
        return {"epoch": self.epoch, "cursor": self.cursor, "head": list(self.head)}

    def load_state_dict(self, state: dict) -> None:
        # a checkpoint of an rlrm before `head`: the epoch's plain shuffle, as it was trained
        self.epoch, self.cursor, self.head = state["epoch"], state["cursor"], list(state.get("head", []))
        self._order = self._epoch_order(self.epoch, self.head)
