"""The content-addressed reward cache: hits, misses, failures never kept, contracts kept apart, the SQLite file
shared by processes, and the faults of its path (rlrm/engine/rewards/cache.py, cache_store.py)."""

from __future__ import annotations

import asyncio
import os
import pickle
import sqlite3
from pathlib import Path

import pytest

from rlrm.call_errors import BadRequest
from rlrm.config.reward import RewardConfig
from rlrm.engine.rewards.base import RewardResult, RewardSample
from rlrm.engine.rewards.cache import RewardCache, cache_key
from rlrm.engine.rewards.cache_store import CacheFileError, SqliteStore
from rlrm.engine.rewards.contract import reward_contract
from rlrm.engine.rewards.loop import RewardLoop

MODEL = {"name": "judge", "path": "/m", "weights": "sha256:0"}


def sample(i: int, response: str, uid: str = "p0") -> RewardSample:
    return RewardSample(uid, i, "t", [{"role": "user", "content": "1+2?"}], response, "3", {"question": "1+2?"})


def genrm_cfg(**kw) -> RewardConfig:
    base = {
        "kind": "genrm",
        "server": {"model": "judge", "request_timeout_s": 1},
        "attempt_timeout_s": 1,
        "max_retries": 0,
        "backoff_s": 0.0,
    }
    return RewardConfig(**{**base, **kw})


class CountingJudge:
    """A judge stand-in: `score` for every sample, a model call counted in the extra info, a short wait."""

    def __init__(self, score: float = 1.0, fail_first: int = 0, verdict: str = "Score: 10"):
        self.calls: list[str] = []
        self.score, self.fail_first, self.verdict = score, fail_first, verdict

    async def __call__(self, s: RewardSample) -> RewardResult:
        self.calls.append(s.solution_str)
        await asyncio.sleep(0.01)
        if len(self.calls) <= self.fail_first:
            raise BadRequest("judge said no")  # not retryable: a failure after one attempt
        extra = {
            "judge_verdict": self.verdict,
            "model_calls": 1,
            "judge_prompt_tokens": 20,
            "judge_completion_tokens": 4,
        }
        return RewardResult(self.score, extra)


def loop_with_cache(cfg: RewardConfig, fn, path=None) -> RewardLoop:
    if path is not None:
        cfg = cfg.model_copy(update={"cache": cfg.cache.model_copy(update={"path": str(path)})})
    cache = RewardCache.open(cfg.cache, cfg.kind, reward_contract(cfg, MODEL).fingerprint)
    return RewardLoop(fn, cfg, cache=cache)


def test_a_group_repeating_a_response_calls_the_judge_once_per_distinct_response():
    judge = CountingJudge()
    loop = loop_with_cache(genrm_cfg(), judge)
    batch = [sample(i, "#### 3" if i % 4 else "#### 4") for i in range(8)]  # 2 distinct responses, 8 samples

    results = asyncio.run(loop.score_all(batch))
    metrics = loop.take_metrics()
    assert sorted(judge.calls) == ["#### 3", "#### 4"]  # the 6 repeats waited for the first of theirs
    assert metrics["reward/cache_hits"] == 6 and metrics["reward/cache_misses"] == 2
    assert metrics["reward/cache_hit_rate"] == pytest.approx(0.75)
    assert metrics["reward/model_calls"] == 2  # what was really sent
    assert metrics["reward/cache_saved_model_calls"] == 6 and metrics["reward/cache_saved_prompt_tokens"] == 120
    assert [r.extra["reward_cached"] for r in results].count(True) == 6
    assert all(r.score == 1.0 and r.extra["judge_verdict"] == "Score: 10" for r in results)
    assert all("model_calls" not in r.extra for r in results if r.extra["reward_cached"])  # a hit made no call


def test_the_rule_is_not_cached_unless_asked():
    assert RewardCache.open(RewardConfig().cache, "rule", "f") is None
    assert RewardCache.open(RewardConfig(cache={"enabled": "true"}).cache, "rule", "f") is not None
    assert RewardCache.open(genrm_cfg(cache={"enabled": False}).cache, "genrm", "f") is None
    assert RewardCache.open(genrm_cfg().cache, "genrm", "f") is not None


def test_a_judge_that_samples_is_not_cached_unless_asked():
    """At temperature > 0 each verdict is a fresh draw: a kept one would stand in for it, so auto leaves it out."""
    assert RewardCache.open(genrm_cfg().cache, "genrm", "f", sampled=True) is None
    assert RewardCache.open(genrm_cfg(cache={"enabled": True}).cache, "genrm", "f", sampled=True) is not None


def test_a_failure_is_never_cached():
    judge = CountingJudge(fail_first=1)
    loop = loop_with_cache(genrm_cfg(on_failure="default", default_score=-1.0), judge)

    first = asyncio.run(loop.score(sample(0, "#### 3")))
    second = asyncio.run(loop.score(sample(1, "#### 3")))
    assert first.score == -1.0 and first.extra["reward_failed"]  # defaulted: counted as a failure
    assert second.score == 1.0 and second.extra["reward_cached"] is False  # scored again, not the default
    third = asyncio.run(loop.score(sample(2, "#### 3")))
    assert third.extra["reward_cached"] is True and len(judge.calls) == 2


def test_samples_waiting_on_a_failed_first_are_each_scored_on_their_own():
    judge = CountingJudge(fail_first=1)
    loop = loop_with_cache(genrm_cfg(on_failure="default", default_score=-1.0), judge)
    results = asyncio.run(loop.score_all([sample(i, "#### 3") for i in range(3)]))
    scores = sorted(r.score for r in results)
    assert scores[0] == -1.0 and scores[1:] == [1.0, 1.0]  # one failure, not three
    assert len(judge.calls) <= 3 and loop.take_metrics()["reward/failures"] == 1


def test_two_contracts_sharing_one_file_never_read_each_other(tmp_path):
    path = tmp_path / "judge.sqlite"
    old_judge, new_judge = CountingJudge(score=1.0), CountingJudge(score=0.0)
    old = loop_with_cache(genrm_cfg(), old_judge, path)
    asyncio.run(old.score(sample(0, "#### 3")))
    new_template = "Grade it: {question} {response} Score: N"
    new = loop_with_cache(genrm_cfg(genrm={"template": new_template}), new_judge, path)

    result = asyncio.run(new.score(sample(0, "#### 3")))
    assert result.score == 0.0 and new_judge.calls == ["#### 3"]  # not the old template's 1.0
    assert result.extra["reward_cached"] is False
    same = loop_with_cache(genrm_cfg(), CountingJudge(score=0.5), path)  # the old contract again, a new run
    again = asyncio.run(same.score(sample(5, "#### 3", uid="other")))
    assert again.score == 1.0 and again.extra["reward_cached"] is True  # from the file, not the new judge's 0.5
    for loop in (old, new, same):
        loop.cache.close()


def test_the_key_covers_the_reference_and_the_prompt_not_the_uid():
    a = sample(0, "#### 3")
    assert cache_key("f", a) == cache_key("f", sample(7, "#### 3", uid="other"))
    assert cache_key("f", a) != cache_key("g", a)
    moved = RewardSample(a.uid, 0, "t", a.prompt, a.solution_str, "4", a.extra_info)
    assert cache_key("f", a) != cache_key("f", moved)
    asked = RewardSample(a.uid, 0, "t", [{"role": "user", "content": "2+1?"}], a.solution_str, "3", a.extra_info)
    assert cache_key("f", a) != cache_key("f", asked)


def test_arrays_in_extra_info_are_keyed_whole():
    # parquet's lists come back as numpy arrays; their str() elides long ones and rounds floats
    import numpy as np

    def keyed(extra):
        return cache_key("f", RewardSample("p", 0, "t", [{"role": "user", "content": "q"}], "r", "1", extra))

    long_a, long_b = np.arange(2000), np.arange(2000)
    long_b[1000] = -1
    assert keyed({"tests": long_a}) != keyed({"tests": long_b})
    assert keyed({"tol": np.array([1e-9])}) != keyed({"tol": np.array([1.000000001e-9])})
    assert keyed({"tests": np.arange(3)}) == keyed({"tests": np.arange(3)})


def test_memory_and_file_are_bounded(tmp_path):
    store = SqliteStore.open(tmp_path / "c.sqlite", max_entries=3)
    for i in range(10):
        store.put(f"k{i}", "f", {"score": i, "extra": {}})
    assert store.evict() == 7 and len(store) == 3
    assert store.get("k0") is None and store.get("k9") == {"score": 9, "extra": {}}
    store.close()
    cache = RewardCache("f", max_entries=2)
    judge = CountingJudge()
    loop = RewardLoop(judge, genrm_cfg(), cache=cache)
    for i, text in enumerate(["a", "b", "c", "a"]):
        asyncio.run(loop.score(sample(i, text)))
    assert judge.calls == ["a", "b", "c", "a"]  # "a" was pushed out by "c"


@pytest.mark.parametrize(
    "content, why",
    [
        (b"name: not a cache\n", "not a SQLite file"),
        (pickle.dumps({"score": 1.0}), "not a SQLite file"),
        (b"SQLite format 3\x00" + b"\x07" * 2000, "SQLite cannot read it"),
    ],
)
def test_a_foreign_or_corrupt_file_is_refused_in_one_line(tmp_path, content, why):
    path = tmp_path / "cache.sqlite"
    path.write_bytes(content)
    with pytest.raises(CacheFileError, match=why) as info:
        RewardCache.open(genrm_cfg(cache={"path": str(path)}).cache, "genrm", "f")
    assert "\n" not in str(info.value) and "reward.cache.path" in str(info.value)
    assert path.read_bytes() == content  # left as it was


def test_another_programs_sqlite_database_is_refused(tmp_path):
    path = tmp_path / "app.db"
    conn = sqlite3.connect(path)
    conn.execute("CREATE TABLE users (name TEXT)")
    conn.commit()
    conn.close()
    with pytest.raises(CacheFileError, match="something else"):
        SqliteStore.open(path, 10)


def test_a_cache_file_in_a_folder_not_made_yet_gets_its_folder(tmp_path, capsys):
    path = tmp_path / "no-such-folder" / "deeper" / "cache.sqlite"
    judge = CountingJudge()
    loop = loop_with_cache(genrm_cfg(), judge, path)
    asyncio.run(loop.score_all([sample(i, "#### 3") for i in range(2)]))
    assert path.is_file() and loop.take_metrics().get("reward/cache_errors", 0) == 0
    assert "warning" not in capsys.readouterr().err


def test_a_cache_path_that_cannot_be_created_leaves_the_run_cached_in_memory(tmp_path, capsys):
    (tmp_path / "a-file").write_text("x")
    path = tmp_path / "a-file" / "cache.sqlite"  # its folder would be a file
    judge = CountingJudge()
    loop = loop_with_cache(genrm_cfg(), judge, path)
    results = asyncio.run(loop.score_all([sample(i, "#### 3") for i in range(4)]))
    assert [r.score for r in results] == [1.0] * 4 and len(judge.calls) == 1
    metrics = loop.take_metrics()
    assert metrics["reward/cache_errors"] == 1 and metrics["reward/cache_hits"] == 3
    assert capsys.readouterr().err.count("warning: reward cache file not used") == 1


@pytest.mark.skipif(
    os.geteuid() == 0,
    reason="root writes into a read-only folder: tests/integration/engine/test_reward_cache_read_only.py",
)
def test_a_read_only_folder_leaves_the_run_cached_in_memory(tmp_path, capsys):
    folder = tmp_path / "ro"
    folder.mkdir()
    folder.chmod(0o555)
    try:
        loop = loop_with_cache(genrm_cfg(), CountingJudge(), folder / "cache.sqlite")
        asyncio.run(loop.score(sample(0, "#### 3")))
        assert loop.take_metrics()["reward/cache_errors"] == 1
        assert "warning: reward cache file not used" in capsys.readouterr().err
    finally:
        folder.chmod(0o755)


def test_a_full_disk_is_warned_once_and_counted(tmp_path, capsys):
    judge = CountingJudge(verdict="x" * 20_000 + " Score: 10")  # a row that needs new pages
    loop = loop_with_cache(genrm_cfg(), judge, tmp_path / "cache.sqlite")
    conn = loop.cache.store.conn
    (pages,) = conn.execute("PRAGMA page_count").fetchone()
    conn.execute(f"PRAGMA max_page_count = {pages}")  # SQLite answers SQLITE_FULL from here on: a full disk
    results = asyncio.run(loop.score_all([sample(i, f"#### {i % 2}") for i in range(6)]))
    assert all(r.score == 1.0 for r in results) and len(judge.calls) == 2  # still cached in memory
    metrics = loop.take_metrics()
    assert metrics["reward/cache_errors"] == 1 and loop.cache.store is None
    assert capsys.readouterr().err.count("database or disk is full") == 1


def _judged_file(path, cfg, responses, score=0.75):
    """A cache file holding `responses` judged `score` under cfg's contract, closed (its -wal and -shm gone)."""
    loop = loop_with_cache(cfg, CountingJudge(score=score), path)
    asyncio.run(loop.score_all([sample(i, r) for i, r in enumerate(responses)]))
    loop.cache.close()


def test_a_hit_is_served_when_the_file_turns_read_only_during_the_run(tmp_path, capsys):
    """A found entry whose LRU stamp SQLite refuses (the file made read-only): before, the whole get failed, the
    hit became a judge call and the file was dropped for the run."""
    cfg, path = genrm_cfg(), tmp_path / "c.sqlite"
    _judged_file(path, cfg, ["#### 3"])
    judge = CountingJudge(score=0.25)
    loop = loop_with_cache(cfg, judge, path)
    loop.cache.store.conn.execute("PRAGMA query_only = 1")  # SQLite answers SQLITE_READONLY to every write
    results = asyncio.run(loop.score_all([sample(0, "#### 3"), sample(1, "#### 4"), sample(2, "#### 5")]))
    assert [r.score for r in results] == [0.75, 0.25, 0.25] and judge.calls == ["#### 4", "#### 5"]
    assert loop.cache.store is not None and loop.cache.store.read_only is not None  # still served from
    metrics = loop.take_metrics()
    assert metrics["reward/cache_hits"] == 1 and metrics["reward/cache_errors"] == 1  # counted once, when found
    err = capsys.readouterr().err
    assert err.count(f"warning: reward cache {path} is read-only") == 1 and "not used" not in err
    assert "its entries are served, new ones are kept in memory only" in err


def test_a_file_this_user_cannot_write_is_served_and_never_written(tmp_path, capsys, monkeypatch):
    """A shared cache file the user may read and not write (os.access says so; root may write anything, so the
    test asks os.access rather than chmod): its entries are served, new scores are kept in memory, and neither
    the file nor its folder is touched, while entries its owner writes during the run are served too."""
    cfg, path = genrm_cfg(), tmp_path / "shared" / "c.sqlite"
    _judged_file(path, cfg, ["#### 3"])
    before = path.read_bytes()
    cannot_write = {path.parent, path}
    real_access = os.access
    monkeypatch.setattr(
        os, "access", lambda p, mode, **kw: not (mode & os.W_OK and Path(p) in cannot_write) and real_access(p, mode)
    )
    judge = CountingJudge(score=0.25)
    loop = loop_with_cache(cfg, judge, path)
    results = asyncio.run(loop.score_all([sample(0, "#### 3"), sample(1, "#### 4"), sample(2, "#### 4")]))
    assert [r.score for r in results] == [0.75, 0.25, 0.25] and judge.calls == ["#### 4"]
    assert path.read_bytes() == before and sorted(path.parent.iterdir()) == [path]  # no -wal, -shm of its own
    cannot_write.clear()  # the owner
    _judged_file(path, cfg, ["#### 5"], score=0.5)
    assert asyncio.run(loop.score(sample(3, "#### 5"))).score == 0.5 and judge.calls == ["#### 4"]
    metrics = loop.take_metrics()
    assert metrics["reward/cache_hits"] == 3 and metrics["reward/cache_errors"] == 1
    assert capsys.readouterr().err.count("is read-only (the file cannot be written by this user)") == 1
    loop.cache.close()


TURNS = [
    {"role": "assistant", "text": "<call>calc 1+2</call>", "tool_reward": 0.5},
    {"role": "tool", "name": "calc", "text": "3"},
    {"role": "assistant", "text": "#### 3"},
]


def trajectory(versions=(0, 0)) -> RewardSample:
    """An agent trajectory's sample: its assistant turns carry the policy versions that wrote them."""
    turns = [dict(TURNS[0], policy_versions=[versions[0]]), TURNS[1], dict(TURNS[2], policy_versions=[versions[1]])]
    return RewardSample("p0", 0, "t", [{"role": "user", "content": "1+2?"}], "#### 3", "3", {"turns": turns})


def test_tool_rewards_in_turn_scores_are_part_of_the_contract(tmp_path):
    # the setting decides the turn scores a hit brings back: a file shared by runs with and without it
    on, off = genrm_cfg(tool_rewards_as_turn_scores=True), genrm_cfg()
    first = loop_with_cache(on, CountingJudge(), tmp_path / "c.sqlite")
    assert asyncio.run(first.score(trajectory())).extra["turn_scores"] == [0.5, 0.0]
    first.cache.close()
    second = loop_with_cache(off, CountingJudge(), tmp_path / "c.sqlite")
    again = asyncio.run(second.score(trajectory()))
    assert again.extra["reward_cached"] is False and "turn_scores" not in again.extra
    assert "turn_scores" not in reward_contract(off, MODEL).parts  # runs without it keep their fingerprints


def test_the_same_trajectory_written_by_later_weights_is_a_hit():
    assert cache_key("f", trajectory(versions=(3, 3))) == cache_key("f", trajectory(versions=(4, 5)))
    other = trajectory()
    other.extra_info["turns"][2]["text"] = "#### 4"
    assert cache_key("f", other) != cache_key("f", trajectory())


def test_extra_info_json_cannot_sort_still_keys_and_keys_apart():
    a = RewardSample("p0", 0, "t", "q", "r", "3", {"m": {1: "a", "b": "c"}})  # sort_keys cannot order 1 and "b"
    b = RewardSample("p0", 0, "t", "q", "r", "3", {"m": {"1": "a", "b": "c"}})
    c = RewardSample("p0", 0, "t", "q", "r", "3", {"m": {(1, 2): "a"}})
    assert len({cache_key("f", a), cache_key("f", b), cache_key("f", c)}) == 3


def test_a_result_json_cannot_hold_is_scored_not_kept():
    async def fn(s):
        return RewardResult(1.0, {"pairs": {(1, 2): 3}, "model_calls": 1})

    loop = loop_with_cache(genrm_cfg(), fn)
    results = asyncio.run(loop.score_all([sample(0, "#### 3"), sample(1, "#### 3")]))
    assert [r.score for r in results] == [1.0, 1.0] and not any(r.extra["reward_cached"] for r in results)
    assert loop.take_metrics()["reward/cache_errors"] == 2


def test_a_reported_numpy_bool_comes_back_from_a_hit_as_a_bool(tmp_path):
    import numpy as np

    from rlrm.engine.rewards.reported import reported_metrics

    async def fn(s):
        return {"score": 1.0, "acc": np.bool_(True), "rate": np.float32(0.5)}

    path = tmp_path / "reward.py"  # the contract reads the file; `fn` stands in for what it defines
    path.write_text("def compute_score(data_source, solution_str, ground_truth, extra_info):\n    return 1.0\n")
    cfg = RewardConfig(kind="custom", custom={"path": str(path)}, cache={"enabled": True}, max_retries=0)
    loop = RewardLoop(fn, cfg, cache=RewardCache.open(cfg.cache, cfg.kind, reward_contract(cfg).fingerprint))
    results = asyncio.run(loop.score_all([sample(0, "#### 3"), sample(1, "#### 3")]))
    assert [r.extra["reward_cached"] for r in results] == [False, True]
    assert results[1].extra["acc"] is True
    assert reported_metrics(results) == {"reward/reported/acc/mean": 1.0, "reward/reported/rate/mean": 0.5}


@pytest.mark.parametrize(
    "value",
    [
        {"score": float("nan"), "extra": {}},
        {"score": 1e39, "extra": {}},
        {"score": True, "extra": {}},
        {"score": 1.0, "extra": {}, "cost": []},
        {"score": 1.0, "extra": {}, "cost": {"model_calls": "1"}},
        {"score": 1.0, "extra": {"reward_components": {"a": float("inf")}}},
        {"score": 1.0, "extra": {"turn_scores": ["x"]}},
        {"score": 1.0, "extra": []},
    ],
    ids=["nan", "beyond-float32", "bool", "cost-list", "cost-text", "component-inf", "turn-text", "extra-list"],
)
def test_an_entry_in_the_file_is_checked_as_a_fresh_score(tmp_path, value):
    cfg, judge = genrm_cfg(), CountingJudge(score=0.25)
    store = SqliteStore.open(tmp_path / "c.sqlite", 10)
    store.put(cache_key(reward_contract(cfg, MODEL).fingerprint, sample(0, "#### 3")), "f", value)
    store.close()
    loop = loop_with_cache(cfg, judge, tmp_path / "c.sqlite")
    result = asyncio.run(loop.score(sample(0, "#### 3")))
    assert result.score == 0.25 and result.extra["reward_cached"] is False and len(judge.calls) == 1
    assert loop.take_metrics()["reward/cache_errors"] == 1


def _writer(path: str, who: int, n: int) -> None:
    store = SqliteStore.open(path, max_entries=10_000)
    for i in range(n):
        store.put(f"{who}-{i}", "f", {"score": float(i), "extra": {"who": who}})
        assert store.get(f"{(who + 1) % 2}-{i // 2}") in (
            None,
            {"score": float(i // 2), "extra": {"who": (who + 1) % 2}},
        )
    store.close()
