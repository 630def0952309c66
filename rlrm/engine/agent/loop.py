"""The agent loop: one multi-turn trajectory over any RolloutEngine, tool observations spliced in as tokens.

    settings = AgentSettings(tools=build_tools(["calculator"]), max_turns=4, max_response_tokens=128)
    traj = await run_agent(engine, prompt_ids, SamplingParams(seed=7), tokenizer, settings, ToolCounts())
    traj.token_ids      # generated and observation tokens, interleaved
    traj.loss_mask      # 1 on generated tokens, 0 on observation tokens (attended to, never trained on)

Tool-call format: the policy writes `<call>NAME ARGUMENTS</call>` (`<call>calculator 12+34</call>`); the
loop appends `<obs>RESULT</obs>` and generation resumes. Stopping at the closing tag: `</call>` is
several tokens in a BPE vocabulary (six in the tiny tokenizer), and the engine contract only stops
on token ids, so each request stops on the closing tag's *last* token (`>`) as a hint, and the
decoded tail is checked after every request: when the tag is closed the response is cut right
after the token that closed it (the tokens the engine drew past it are dropped, log-probs with
them); when the `>` closed something else (`<call>` itself) the loop asks the engine to go on from
there. A tokenizer that merges `>` with its neighbours still works: the hint never fires and the
tail check cuts the longer response.

A turn is one policy segment ending in a tool call or the end. The trajectory ends with "stop"
(EOS: the answer), "length" (the response budget `max_response_tokens`, observations included,
ran out) or "max_turns" (the last allowed turn ended in a call, which is not run). Generated
tokens and observation tokens are never re-tokenised: what the actor scores is what was sampled.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field, replace

from rlrm.config.latency import LatencyDist
from rlrm.engine.agent.tools import Tool, ToolCounts, run_tool
from rlrm.inference.base import Completion, SamplingParams

MAX_RESTARTS = 3
_SEED_MOD = 2**63 - 1  # seeds stay in int64, as rlrm/engine/scheduling/requests.py makes them


@dataclass(frozen=True)
class AgentSettings:
    """How one trajectory runs (from `rollout.agent` and `rollout.max_new_tokens`)."""

    tools: dict[str, Tool]
    max_turns: int
    max_response_tokens: int
    tool_timeout_s: float = 10.0
    max_observation_chars: int = 256
    call_tag: str = "call"  # the policy writes <call>NAME ARGUMENTS</call>
    observation_tag: str = "obs"  # the loop appends <obs>RESULT</obs>
    tool_latency: LatencyDist | None = None  # rollout.agent.inject: slept before every tool call
    tool_latency_seed: int = 0

    def tool_delay_s(self, sample_seed: int | None, call: int) -> float:
        """The injected latency of the trajectory's `call`-th tool call: a function of the seeds and `call` only."""
        if self.tool_latency is None:
            return 0.0
        return self.tool_latency.sample(random.Random(f"{self.tool_latency_seed}:{sample_seed}:{call}"))

    @property
    def open(self) -> str:
        return f"<{self.call_tag}>"

    @property
    def close(self) -> str:
        return f"</{self.call_tag}>"


@dataclass
class _Trace:
    """What the trajectory has built so far."""

    tokens: list[int] = field(default_factory=list)
    mask: list[int] = field(default_factory=list)
    log_probs: list[float] = field(default_factory=list)
    versions: list[int] = field(default_factory=list)
    turns: list[dict] = field(default_factory=list)
    tool_rewards: list[float] = field(default_factory=list)
    requests: int = 0
    pin_version: bool = False  # raise _NewWeights when a request's version differs from the first

    def add(self, tokens: list[int], log_probs: list[float], trained: bool) -> None:
        self.tokens += tokens
        self.mask += [1 if trained else 0] * len(tokens)
        self.log_probs += log_probs if trained else [0.0] * len(tokens)


async def run_agent(
    engine, prompt_ids: list[int], sampling: SamplingParams, tokenizer, settings: AgentSettings, counts: ToolCounts
) -> Completion:
    """Run one trajectory; a Completion whose `loss_mask` marks the generated tokens and whose meta["agent"] holds
    the per-turn policy versions, the turns and verl-style `extra_info` (num_turns, tool_calls, turns).

    A trajectory is one policy's: when new weights land mid-trajectory (off-policy modes update the engine while
    it generates), it starts over under the new ones (`agent/version_restarts`), up to MAX_RESTARTS times; after
    that it is kept as it is, mixed (`agent/mixed_version_ratio`), so a run whose updates outpace its
    trajectories still makes progress. Tools run again on a restart: a user tool with side effects sees it twice.
    """
    requests = 0
    for attempt in range(MAX_RESTARTS + 1):
        trace = _Trace(requests=requests, pin_version=attempt < MAX_RESTARTS)
        try:
            return await _attempt(engine, prompt_ids, sampling, tokenizer, settings, counts, trace)
        except _NewWeights:
            counts.add("version_restarts")
            requests = trace.requests  # fresh seeds for the new attempt
    raise AssertionError("the last attempt never restarts")


def _request_seed(seed: int | None, request: int) -> int | None:
    """Fresh draws per request of a trajectory; the first is the sample's own seed. Mixed, not added: the samples
    of a group have consecutive seeds (rlrm/engine/scheduling/requests.py), so `seed + request` gave sample j's
    second request sample j+1's first one's draws."""
    if seed is None or request == 0:
        return seed
    return (seed * 1_000_003 + request) % _SEED_MOD


class _NewWeights(Exception):
    """A request came back from other weights than the trajectory's first."""


async def _attempt(engine, prompt_ids, sampling, tokenizer, settings: AgentSettings, counts, trace: _Trace):
    hint = _hint_ids(tokenizer, settings.close)
    finish = "length"
    for turn in range(settings.max_turns):
        segment, seg_lp, seg_versions, reason = await _segment(
            engine, prompt_ids, sampling, tokenizer, settings, trace, hint
        )
        trace.add(segment, seg_lp, trained=True)
        text = _turn_text(tokenizer, segment, settings)
        record = {"role": "assistant", "text": text, "policy_versions": seg_versions, "tokens": len(segment)}
        trace.turns.append(record)
        if reason != "call":
            if reason == "stop" and settings.open in text.rsplit(settings.close, 1)[-1]:
                counts.add("malformed_calls")  # an unterminated call at EOS: the answer stands as written
            finish = reason
            break
        if turn + 1 == settings.max_turns:
            finish = "max_turns"
            break
        name, arguments = _parse_call(text, settings.open, settings.close)
        record["tool_call"] = {"name": name, "arguments": arguments}
        if len(trace.tokens) >= settings.max_response_tokens:  # no room for its result: the policy never reads it
            finish = "length"
            break
        if name is None:
            counts.add("malformed_calls")
            result = f"error: malformed tool call; write {settings.open}NAME ARGUMENTS{settings.close}"
        else:
            rewarded = len(trace.tool_rewards)
            result = await run_tool(
                settings.tools,
                name,
                arguments,
                settings.tool_timeout_s,
                settings.max_observation_chars,
                counts,
                trace.tool_rewards,
                settings.tool_delay_s(sampling.seed, turn),
            )
            if len(trace.tool_rewards) > rewarded:  # the turn's own tool reward (reward.tool_rewards_as_turn_scores)
                record["tool_reward"] = trace.tool_rewards[-1]
        result = result.encode("utf-8", "replace").decode("utf-8")  # a lone surrogate (a file name) is no text
        record["tool_result"] = result
        tag = settings.observation_tag
        # the tags as the model knows them (a chat template's tool tags may be tokens of their own), the result as text
        opened, closed = (tokenizer.encode(t, add_special_tokens=False) for t in (f"<{tag}>", f"</{tag}>"))
        obs = opened + _plain_ids(tokenizer, result) + closed
        room = settings.max_response_tokens - len(trace.tokens)
        if len(obs) > room:  # cut to the budget: the reward reads what the policy read, not the whole result
            result = tokenizer.decode(obs[:room]).removeprefix(f"<{tag}>")
            record["tool_result"] = result
        trace.turns.append({"role": "tool", "name": name, "text": result, "tokens": min(len(obs), room)})
        trace.add(obs[:room], [], trained=False)
        if len(obs) >= room:
            finish = "length"
            break
    return _completion(prompt_ids, trace, finish)


async def _segment(engine, prompt_ids, sampling, tokenizer, settings, trace: _Trace, hint: list[int]):
    """Generate one turn: requests (resumed after a false `>` hint) until the closing tag, EOS or the budget."""
    tokens: list[int] = []
    log_probs: list[float] = []
    versions: list[int] = []
    stops = sorted(set(sampling.stop_token_ids or []) | set(hint))
    while True:
        budget = settings.max_response_tokens - len(trace.tokens) - len(tokens)
        if budget <= 0:
            return tokens, log_probs, versions, "length"
        seed = _request_seed(sampling.seed, trace.requests)
        trace.requests += 1
        params = replace(sampling, max_new_tokens=budget, stop_token_ids=stops, seed=seed)
        done = await engine.generate(prompt_ids + trace.tokens + tokens, params)
        if trace.pin_version and trace.versions and done.policy_version != trace.versions[0]:
            raise _NewWeights
        versions.append(done.policy_version)
        trace.versions.append(done.policy_version)
        cut = _close_cut(tokenizer, settings.close, tokens, done.token_ids)
        new = done.token_ids if cut is None else done.token_ids[:cut]
        tokens += new
        log_probs += done.log_probs[: len(new)]
        if cut is not None:
            return tokens, log_probs, versions, "call"
        ended_on_hint = done.finish_reason == "stop" and new and new[-1] in hint
        if ended_on_hint and new[-1] not in (sampling.stop_token_ids or []):
            continue  # the `>` closed something other than </call>: go on from here
        return tokens, log_probs, versions, done.finish_reason


def _plain_ids(tokenizer, text: str) -> list[int]:
    """`text` as token ids of text only: a tool's `<|im_end|>` or EOS string stays those characters, never the
    control token (which would forge the end of a turn, or a new one, in the policy's context)."""
    try:
        return list(tokenizer(text, add_special_tokens=False, split_special_tokens=True)["input_ids"])
    except TypeError:  # a tokenizer without split_special_tokens
        return tokenizer.encode(text, add_special_tokens=False)


def _close_cut(tokenizer, close: str, before: list[int], new: list[int]) -> int | None:
    """The fewest of `new` after which the turn's text holds the closing tag, or None when it never does (a binary
    search: once a prefix's text holds the ASCII tag, every longer one does)."""
    if close not in tokenizer.decode(before + new):
        return None
    low, high = 1, len(new)
    while low < high:
        mid = (low + high) // 2
        if close in tokenizer.decode(before + new[:mid]):
            high = mid
        else:
            low = mid + 1
    return low


def _turn_text(tokenizer, segment: list[int], settings: AgentSettings) -> str:
    """An assistant turn's text without its special tokens (EOS, padding), but with the call tags when the
    vocabulary has them as special tokens of their own: skipped, a call the policy closed read as malformed."""
    tags = set()
    for tag in (settings.open, settings.close):
        ids = tokenizer.encode(tag, add_special_tokens=False)
        if len(ids) == 1:
            tags.add(ids[0])
    drop = set(getattr(tokenizer, "all_special_ids", ()) or ()) - tags
    return tokenizer.decode([t for t in segment if t not in drop], skip_special_tokens=False)


def _parse_call(text: str, open_tag: str, close_tag: str) -> tuple[str | None, str]:
    """(name, arguments) of the turn's last `<call>NAME ARGUMENTS</call>`, or (None, body) when malformed."""
    body = text.split(close_tag, 1)[0]
    if open_tag not in body:
        return None, body
    parts = body.rsplit(open_tag, 1)[1].split(None, 1)  # the name ends at any whitespace (a newline, a tab)
    if not parts:
        return None, ""
    return parts[0], parts[1].strip() if len(parts) > 1 else ""


def _hint_ids(tokenizer, close: str) -> list[int]:
    """The closing tag's last token when it is one token of its own (the stop hint), else none."""
    ids = tokenizer.encode(close, add_special_tokens=False)
    return ids[-1:] if ids and tokenizer.decode(ids[-1:]) == ">" else []


def trajectory_extra_info(turns: list[dict], tool_rewards: list[float]) -> dict:
    """The extra_info keys a trajectory gives the reward: num_turns, tool_calls (each with the `result` its calling
    turn recorded as `tool_result`), tool_rewards, turns."""
    calls = [t["tool_call"] | {"result": t.get("tool_result")} for t in turns if t.get("tool_call")]
    observations = sum(1 for t in turns if t["role"] == "tool")
    assistant = len(turns) - observations
    # verl's reward loop merges the agent loop's `tool_extra_fields` (its tool loop puts `tool_rewards` there)
    # into extra_info and sets extra_info["num_turns"] from `__num_turns__` = user turns + assistant turns + 1
    return {
        "num_turns": observations + assistant + 1,
        "tool_calls": calls,
        "tool_rewards": tool_rewards,
        "turns": turns,
    }


def _completion(prompt_ids: list[int], trace: _Trace, finish: str) -> Completion:
    agent = {
        "policy_versions": trace.versions,
        "turns": trace.turns,
        "extra_info": trajectory_extra_info(trace.turns, trace.tool_rewards),
    }
    return Completion(
        prompt_ids=list(prompt_ids),
        token_ids=trace.tokens,
        log_probs=trace.log_probs,
        finish_reason=finish,
        policy_version=min(trace.versions) if trace.versions else 0,
        meta={"agent": agent},
        loss_mask=trace.mask,
    )
