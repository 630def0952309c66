"""What a server is for: the policy it generates rollouts with, or the reward model it scores them with.

    role = Role("disrm")            # a profile's or a command line's string, checked once
    role.generates                  # False: a DisRM serves /classify, no generation endpoints
    f"{role}"                       # "disrm": written back as the string profiles and argv use

A `str` enum, so YAML, JSON, argv and `role == "disrm"` in a user's code keep working; rlrm's own code compares
members (`role is Role.POLICY`). A judge is spelled `genrm`, as in `reward.kind` and `--role`.
"""

from __future__ import annotations

from enum import Enum

from rlrm.errors import ConfigError


class Role(str, Enum):
    POLICY = "policy"  # rollout server: generation with token ids and log-probs, takes new weights
    GENRM = "genrm"  # a judge: chat completions
    DISRM = "disrm"  # a sequence classifier: /classify

    def __str__(self) -> str:
        return self.value

    def __format__(self, spec: str) -> str:
        return format(self.value, spec)

    @classmethod
    def parse(cls, text: str) -> Role:
        """The role `text` names; a one-line ConfigError naming the roles otherwise."""
        try:
            return cls(text)
        except ValueError:
            raise ConfigError(f"unknown role {text!r}; use one of {', '.join(r.value for r in cls)}") from None

    @property
    def generates(self) -> bool:
        """Whether its server serves the generation endpoints (a DisRM only classifies)."""
        return self is not Role.DISRM

    @property
    def takes_weights(self) -> bool:
        """Whether its servers load new weights during a run (the policy's, after every update)."""
        return self is Role.POLICY

    @property
    def metrics_prefix(self) -> str:
        """Where its fleet's counters go: the policy's under rollout/, the reward models' under reward/."""
        return "rollout/" if self is Role.POLICY else "reward/"

    @property
    def served(self) -> str:
        """What its servers serve, in words: "the policy", "the disrm reward"."""
        return "the policy" if self is Role.POLICY else f"the {self.value} reward"
