"""What the tiny-model recipes share: padding, left-padded generation and the supervised loop.

    ids, labels, mask = pad_answers([(prompt_ids, answer_ids), ...], pad_id)   # loss on the answers only
    out, width = generate(model, tokenizer, conversations, max_new_tokens=20, do_sample=False)
    fine_tune(model, pairs, steps=300, batch=32, lr=2e-3, pad_id=pad, rng=rng, log=print, label="warm start")
    loss = answer_loss(model, input_ids, mask, labels)   # the LM head on the labelled positions only
    with fixed_threads(BUILD_THREADS): ...     # a build whose float reductions repeat
    metrics = save_build(dest, model, tokenizer, metrics, start)

Used by `tiny_policy.py`, `tiny_judge.py`, `tiny_pairs.py`, `tiny_disrm.py` and `tiny_tools.py`. The built
weights depend on every float operation here (the recipes are versioned by `tiny.RECIPE_VERSION`, and the
tools build by its own `tiny_tools.TOOLS_RECIPE_VERSION`), so a change to this file that changes a build
must bump those versions.
"""

from __future__ import annotations

import random
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Callable, Iterator

PROGRESS_EVERY_S = 10.0  # a first-use build prints a line at least this often

# Every build runs on one torch thread. The ops of a 0.6 M-parameter model are too small to split: with two
# threads each op waits at an OpenMP barrier, and on a busy machine for a thread that is not running (the judge
# took 518 s instead of ~150 s beside one other process; docs/benchmarks.md). One thread also makes a build's
# float reductions, and so its weights, independent of the machine's core count.
BUILD_THREADS = 1


def chat_prompt(tokenizer, messages: list[dict]) -> list[int]:
    """The ids of `messages` in the tokenizer's chat template, ready for the assistant's answer."""
    return list(tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=True, return_dict=False))


def right_pad(sequences: list[list[int]], pad_id: int):
    """[b, width] ids padded on the right, and the attention mask."""
    import torch

    width = max(len(s) for s in sequences)
    ids = torch.full((len(sequences), width), pad_id, dtype=torch.long)
    mask = torch.zeros_like(ids)
    for i, s in enumerate(sequences):
        ids[i, : len(s)] = torch.tensor(s)
        mask[i, : len(s)] = 1
    return ids, mask


def pad_answers(
    pairs: list[tuple[list[int], list[int]]],
    pad_id: int,
    scored_from: list[int] | None = None,
    answer_masks: list[list[int]] | None = None,
):
    """Right-padded prompt + answer ids, labels on the answers only (-100 elsewhere), attention mask.

    Args:
        pairs: (prompt ids, answer ids) per row.
        pad_id: id written into padding.
        scored_from: per row, the first answer token the labels cover (default 0: the whole answer).
        answer_masks: per row, 1/0 per answer token: 0 leaves that token out of the loss (a tool's
            observation, which the model reads but never writes); default: every token scored.

    Returns:
        input_ids, labels, mask: each [b, width].
    """
    import torch

    input_ids, mask = right_pad([p + a for p, a in pairs], pad_id)
    labels = torch.full_like(input_ids, -100)
    for i, (prompt, answer) in enumerate(pairs):
        first = scored_from[i] if scored_from is not None else 0
        labels[i, len(prompt) + first : len(prompt) + len(answer)] = torch.tensor(answer[first:])
        if answer_masks is not None:
            unscored = torch.tensor(answer_masks[i]) == 0  # [len(answer)]
            labels[i, len(prompt) : len(prompt) + len(answer)][unscored] = -100
    return input_ids, labels, mask


def left_pad(prompts: list[list[int]], pad_id: int):
    """[b, width] ids padded on the left (as generation wants them), and the attention mask."""
    import torch

    width = max(len(p) for p in prompts)
    ids = torch.tensor([[pad_id] * (width - len(p)) + list(p) for p in prompts])
    mask = (torch.arange(width)[None, :] >= torch.tensor([width - len(p) for p in prompts])[:, None]).long()
    return ids, mask


def generate(model, tokenizer, conversations: list[list[dict]], repeat: int = 1, **kwargs):
    """`model.generate` on the chat prompts of `conversations`, left-padded, without gradients.

    Args:
        repeat: answers per conversation (rows repeated in place: conversation i gives rows i*repeat ...).
        kwargs: passed to `model.generate` (max_new_tokens, do_sample, ...).

    Returns:
        (what `model.generate` returns, the prompt width: new tokens start at that column).
    """
    import torch

    ids, mask = left_pad([chat_prompt(tokenizer, c) for c in conversations], tokenizer.pad_token_id)
    with torch.no_grad():
        out = model.generate(
            input_ids=ids.repeat_interleave(repeat, 0), attention_mask=mask.repeat_interleave(repeat, 0), **kwargs
        )
    return out, ids.shape[1]


def answer_loss(model, input_ids, mask, labels):
    """The causal LM's mean next-token cross-entropy on the labelled positions (labels != -100), as
    `model(..., labels=labels).loss`, but with the LM head applied to those positions only: answers are a
    tenth of a judge prompt's tokens, and the head over every position was an eighth of a step's work.

    Args:
        model: a causal LM with `.model` (the body) and `.lm_head` (Qwen2ForCausalLM).
        input_ids, mask, labels: [b, t] each (`pad_answers`).
    """
    import torch.nn.functional as F

    hidden = model.model(input_ids=input_ids, attention_mask=mask).last_hidden_state  # [b, t, h]
    targets = labels[:, 1:]  # [b, t-1]: position i predicts token i+1
    scored = targets != -100
    logits = model.lm_head(hidden[:, :-1][scored])  # [n, vocab]
    return F.cross_entropy(logits.float(), targets[scored])


def optimizer_step(optimizer, loss, step: int, total: int, warmup: int = 0) -> None:
    """Backward, clip to 1, then the step at each group's `base_lr` warmed up linearly over `warmup`
    steps (0: none) and decayed linearly to 10% at `total` (a stable end point)."""
    import torch

    optimizer.zero_grad()
    loss.backward()
    torch.nn.utils.clip_grad_norm_([p for g in optimizer.param_groups for p in g["params"]], 1.0)
    for group in optimizer.param_groups:
        warm = min(1.0, (step + 1) / warmup) if warmup else 1.0
        group["lr"] = group["base_lr"] * warm * (1.0 - 0.9 * step / total)
    optimizer.step()


def fine_tune(
    model,
    pairs: list[tuple[list[int], list[int]]],
    *,
    steps: int,
    batch: int,
    lr: float,
    pad_id: int,
    rng: random.Random,
    log: Callable[[str], None],
    label: str,
    warmup: int = 0,
    log_every: int = 100,
    answer_masks: list[list[int]] | None = None,
) -> None:
    """Supervised steps on (prompt ids, answer ids) pairs drawn by `rng`, loss on the answers only
    (AdamW without weight decay, see `optimizer_step` for the schedule); leaves `model` in eval mode.
    `answer_masks` (per pair, 1/0 per answer token, as `pad_answers`) leaves the 0 tokens out of the loss."""
    import torch

    optimizer = torch.optim.AdamW([{"params": list(model.parameters()), "base_lr": lr}], lr=lr, weight_decay=0.0)
    model.train()
    progress = StepProgress(label, steps, log, log_every)
    for step in range(steps):
        # sampling indices draws exactly what sampling the pairs drew: earlier builds keep their weights
        rows = rng.sample(range(len(pairs)), batch)
        masks = None if answer_masks is None else [answer_masks[i] for i in rows]
        input_ids, labels, mask = pad_answers([pairs[i] for i in rows], pad_id, answer_masks=masks)
        loss = answer_loss(model, input_ids, mask, labels)
        optimizer_step(optimizer, loss, step, steps, warmup)
        progress.step(step, loss)
    model.eval()


class StepProgress:
    """A build loop's progress lines: every `every` steps and at least every PROGRESS_EVERY_S, with the time
    so far and an estimate of the time left. `progress.step(step, loss)` after each optimizer step."""

    def __init__(self, label: str, steps: int, log: Callable[[str], None], every: int = 100):
        self.label, self.steps, self.log, self.every = label, steps, log, every
        self.start = self.last_line = time.monotonic()

    def step(self, step: int, loss) -> None:
        now = time.monotonic()
        if (step + 1) % self.every and now - self.last_line < PROGRESS_EVERY_S:
            return
        self.last_line = now
        done_s = now - self.start
        left_s = done_s / (step + 1) * (self.steps - step - 1)
        self.log(
            f"  {self.label} step {step + 1}/{self.steps}  loss {loss.item():.3f}  ({done_s:.0f} s, ~{_duration(left_s)} left)"
        )


def _duration(seconds: float) -> str:
    """`42 s`, `3 min`, `1 h 5 min`: an estimate, rounded as one reads it."""
    if seconds < 90:
        return f"{seconds:.0f} s"
    minutes = round(seconds / 60)
    return f"{minutes} min" if minutes < 60 else f"{minutes // 60} h {minutes % 60} min"


@contextmanager
def fixed_threads(threads: int) -> Iterator[None]:
    """torch's intra-op threads fixed to `threads` inside, restored after: a build's float reductions,
    and so its weights, then repeat for a seed."""
    import torch

    previous = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        yield
    finally:
        torch.set_num_threads(previous)


def built_with() -> dict[str, str]:
    """What a build's floats depend on besides the recipe: torch's version, the CPU kernels it picked and the CPU
    that ran them (one thread, so not the core count). Two builds that agree on these give the same bytes; the
    same kernel set on another vendor's CPU does not (AVX512 on an AMD EPYC built a policy of held-out accuracy
    0.289 where the shipped AVX512 build measured 0.359)."""
    import torch

    return {
        "torch": torch.__version__.split("+")[0],
        "cpu_capability": torch.backends.cpu.get_cpu_capability(),
        "cpu": _cpu_model(),
    }


def _cpu_model() -> str:
    """The CPU's vendor and model as Linux names them ("AuthenticAMD AMD EPYC"), else what `platform` says."""
    import platform

    try:
        lines = Path("/proc/cpuinfo").read_text().splitlines()
    except OSError:
        return platform.processor() or platform.machine()
    fields: dict[str, str] = {}
    for line in lines:
        key, _, value = line.partition(":")
        fields.setdefault(key.strip(), value.strip())
    return " ".join(v for v in (fields.get("vendor_id"), fields.get("model name")) if v) or platform.machine()


def save_build(dest: Path, model, tokenizer, metrics: dict[str, float], start: float) -> dict:
    """Save `model` and `tokenizer` into `dest` (created; must not exist); returns `metrics` rounded to
    4 places, with `build_s` (since `start`, a perf_counter time), `parameters` and `built_with`."""
    dest.mkdir(parents=True)
    model.save_pretrained(dest)
    tokenizer.save_pretrained(dest)
    out: dict[str, object] = {k: round(v, 4) for k, v in metrics.items()}
    out["build_s"] = round(time.perf_counter() - start, 1)
    out["parameters"] = sum(p.numel() for p in model.parameters())
    out["built_with"] = built_with()
    return out
