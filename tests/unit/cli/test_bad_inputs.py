"""Bad inputs through the real CLI, one table: each must exit with its code, print one line that
says what is wrong, and leave nothing behind (no new, changed or removed file, in the working
folder or anywhere under the test's folder).

A case is (id, setup, exit code, needle): `setup(tmp)` writes what the case needs and returns
the command line; the folder is snapshotted after it, so only what the command does is checked.
"""

from __future__ import annotations

import hashlib
import json

import pytest
from typer.testing import CliRunner

from rlrm.cli.main import app

TRAIN = ["train", "--profile", "tiny-rule", "--console", "none"]
GSM8K = ["train", "--profile", "gsm8k-rule", "--console", "none", "--set", "model.path=tiny:policy"]
BENCH = ["bench", "reward-latency", "--modes", "sync,stream", "--steps", "1"]
ROW = {"question": "Ann has 2 cats and buys 3. How many?", "answer": "2 + 3 = 5\n#### 5"}


def _write(path, text):
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path


def _write_bytes(path, data: bytes):
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data)
    return path


def _jsonl(path, rows):
    return _write(path, "\n".join(json.dumps(r) for r in rows) + "\n")


def _run_folder(tmp, config_text):
    _write(tmp / "run" / "config.yaml", config_text)
    _write(tmp / "run" / "metrics.jsonl", '{"step": 1}\n')
    return tmp / "run"


def _parity(tmp, rows, model):
    return [
        "parity",
        "disrm",
        "--input",
        str(_jsonl(tmp / "pairs.jsonl", rows)),
        "--model",
        str(model),
        "--out",
        str(tmp / "parity"),
    ]


PAIR = {"prompt": "What is 2 + 3?", "response": "#### 5", "group_id": 1}


def _tool(tmp, source):
    path = _write(tmp / "my_tool.py", source)
    return [
        *TRAIN,
        "--set",
        "rollout.agent.enabled=true",
        "--set",
        "rollout.agent.tools=[calculator,mine]",
        "--set",
        f"rollout.agent.user_tools={{mine: {path}:mine}}",
    ]


CASES = [
    (
        "rollout.server.weights_dir is a file",
        lambda t, m: [
            *TRAIN,
            "--set",
            "rollout.backend=server",
            "--set",
            f"rollout.server.weights_dir={_write(t / 'w', 'x')}",
        ],
        1,
        "w is a file, not a folder; set it to a writable local folder",
    ),
    (
        "rollout.server.weights_dir under a file",
        lambda t, m: [
            *TRAIN,
            "--set",
            "rollout.backend=server",
            "--set",
            f"rollout.server.weights_dir={_write(t / 'w', 'x')}/sub",
        ],
        1,
        "/w, a file, not a folder",
    ),
    # user tools: refused before the model loads and before a run folder exists
    (
        "user tool fails at import",
        lambda t, m: _tool(t, "import not_a_module_anywhere\n"),
        1,
        "failed to import: ModuleNotFoundError",
    ),
    (
        "user tool not async",
        lambda t, m: _tool(t, "def mine(arguments):\n    return arguments\n"),
        1,
        "has no `async def mine(arguments: str) -> str`",
    ),
    # run folders and output paths
    (
        "train --out is a file",
        lambda t, m: [*TRAIN, "--out", str(_write(t / "taken", "x"))],
        1,
        "is a file, not a folder",
    ),
    (
        "unwritable trainer.out_dir",
        lambda t, m: [*TRAIN, "--set", f"trainer.out_dir={_write(t / 'f', 'x')}/runs"],
        1,
        "cannot write the run folder",
    ),
    (
        "resume with corrupt config.yaml",
        lambda t, m: ["train", "--resume", str(_run_folder(t, "trainer: [steps\n  a: {"))],
        1,
        "config.yaml is not valid YAML (line",
    ),
    (
        "resume with config.yaml not a mapping",
        lambda t, m: ["train", "--resume", str(_run_folder(t, "- 1\n- 2\n"))],
        1,
        "does not hold a profile",
    ),
    ("resume a folder that is not a run", lambda t, m: ["train", "--resume", str(t)], 1, "not an rlrm run folder"),
    (
        "bench --out is a file",
        lambda t, m: [*BENCH, "--out", str(_write(t / "taken", "x"))],
        1,
        "is a file; give a folder",
    ),
    (
        "parity --out is a file",
        lambda t, m: [*_parity(t, [PAIR], m)[:-1], str(_write(t / "taken", "x"))],
        2,
        "is a file; give a folder",
    ),
    # profiles and overrides
    (
        "empty profile",
        lambda t, m: ["train", "--profile", str(_write(t / "p.yaml", "# nothing\n"))],
        1,
        "the profile is empty",
    ),
    ("rollout.n=1e9", lambda t, m: [*TRAIN, "--set", "rollout.n=1e9"], 1, "at most 1024 samples per prompt"),
    ("actor.lr=inf", lambda t, m: [*TRAIN, "--set", "actor.lr=inf"], 1, "actor.lr: Input should be a finite number"),
    (
        "reward.attempt_timeout_s=nan",
        lambda t, m: [*TRAIN, "--set", "reward.attempt_timeout_s=nan"],
        1,
        "reward.attempt_timeout_s: Input should be a finite",
    ),
    (
        "reward.max_failure_rate=2",
        lambda t, m: [*TRAIN, "--set", "reward.max_failure_rate=2"],
        1,
        "reward.max_failure_rate",
    ),
    ("override without =", lambda t, m: [*TRAIN, "--set", "actor.lr"], 1, "must look like section.key=value"),
    # data
    (
        "data.path is one file",
        lambda t, m: [*GSM8K, "--set", f"data.path={_jsonl(t / 'all.jsonl', [ROW])}"],
        1,
        "both read",
    ),
    (
        "ground truth not a number",
        lambda t, m: [
            *GSM8K,
            "--set",
            f"data.path={_jsonl(t / 'train.jsonl', [ROW, {'question': 'q', 'answer': '#### banana'}])}",
            "--set",
            f"data.test_split={_jsonl(t / 'test.jsonl', [ROW])}",
        ],
        1,
        "train.jsonl line 2: ground truth 'banana' is not a number",
    ),
    # latency specs
    (
        "latency with an infinite mean",
        lambda t, m: [*BENCH, "--latency", "pareto:1:0.5", "--out", str(t / "b")],
        1,
        "pareto:1:0.5 has an infinite mean",
    ),
    ("latency spec unknown", lambda t, m: [*BENCH, "--latency", "gamma:1:2", "--out", str(t / "b")], 1, "--latency"),
    (
        "latency for a mode that cannot run",
        lambda t, m: [
            *BENCH,
            "--latency",
            "fixed:1",
            "--out",
            str(t / "b"),
            "--set",
            "reward.kind=disrm",
            "--set",
            "reward.server.model=/m",
            "--set",
            "reward.placement=colocated",
        ],
        1,
        "needs trainer.mode=sync",
    ),
    # found by the config hunt of 2026-11-29: each was a traceback, a silent wrong value or a half-made folder
    (
        "profile not UTF-8",
        lambda t, m: [*TRAIN[:2], str(_write_bytes(t / "latin1.yaml", b"description: caf\xe9\n")), "--dry-run"],
        1,
        "latin1.yaml is not UTF-8 text: save it as UTF-8",
    ),
    (
        "profile key given twice",
        lambda t, m: [
            "train",
            "--profile",
            str(_write(t / "twice.yaml", "extends: tiny-rule\ntrainer:\n  total_steps: 3\n  total_steps: 500\n")),
            "--dry-run",
        ],
        1,
        "line 4 is not valid YAML: 'total_steps' is given twice in one mapping",
    ),
    ("actor.betas beyond 1", lambda t, m: [*TRAIN, "--set", "actor.betas=[2,-1]", "--dry-run"], 1, "actor.betas: each"),
    (
        "trainer.seed beyond 63 bits",
        lambda t, m: [*TRAIN, "--set", "trainer.seed=1180591620717411303424", "--dry-run"],
        1,
        "trainer.seed: Input should be less than 9223372036854775808",
    ),
    ("--mode unknown", lambda t, m: [*TRAIN, "--mode", "bogus", "--dry-run"], 1, "--mode 'bogus' is not a scheduling"),
    (  # 4,096 distinct sums of 1..2 cannot be made: a traceback after the run folder was made, and --dry-run passed
        "synthetic range too narrow",
        lambda t, m: [*TRAIN, "--set", "data.synthetic.max_value=2"],
        1,
        "cannot make 4096 distinct train problems",
    ),
    (
        "a key in extra_args",
        lambda t, m: [
            "train",
            "--profile",
            "tiny-genrm",
            "--set",
            "reward.server.extra_args=[--api-key, s3cret]",
            "--dry-run",
        ],
        1,
        "entry 0 passes a key on the servers' command line",
    ),
    (
        "latency whose mean overflows",
        lambda t, m: [*BENCH, "--latency", "lognormal:1000:1", "--out", str(t / "b")],
        1,
        "--latency lognormal:1000:1: its mean is not finite",
    ),
    (
        "parity min-spearman nan",
        lambda t, m: [*_parity(t, [PAIR], m), "--min-spearman", "nan"],
        2,
        "--min-spearman nan: a correlation lies between -1 and 1",
    ),
    (
        "parity reward atol inf",
        lambda t, m: ["parity", "reward", "--atol", "inf", "--dry-run"],
        2,
        "--atol inf: must be a finite number at least 0",
    ),
    # found by the reward composition hunt: each trained on NaN advantages, or on a penalty that changed nothing
    (
        "default_score nan",
        lambda t, m: [*TRAIN, "--set", "reward.on_failure=default", "--set", "reward.default_score=.nan", "--dry-run"],
        1,
        "reward.default_score=nan is no score training can use",
    ),
    (
        "gate with a DisRM",
        lambda t, m: [
            *TRAIN,
            *("--set", "reward.kind=composite", "--set", "reward.composite.mode=gate"),
            *("--set", "reward.composite.model_kind=disrm", "--set", "reward.server.model=tiny:disrm", "--dry-run"),
        ],
        1,
        "a DisRM's score of a right answer can fall below",
    ),
    (
        "gate with a format score",
        lambda t, m: [
            *TRAIN,
            *("--set", "reward.kind=composite", "--set", "reward.composite.mode=gate"),
            *("--set", "reward.format_score=0.1", "--set", "reward.server.model=tiny:judge", "--dry-run"),
        ],
        1,
        "a right answer the judge scores 0 would get less than a wrong one",
    ),
    (
        "gdpo with the overlong penalty",
        lambda t, m: [
            *TRAIN,
            *("--set", "algorithm.component_norm=gdpo", "--set", "reward.component_weights={correct: 1.0}"),
            *("--set", "reward.overlong.buffer_len=4", "--dry-run"),
        ],
        1,
        "the overlong penalty lowers only the score",
    ),
    (
        "launch vllm with an embedded server's flag",
        lambda t, m: [
            "launch",
            "server",
            "--backend",
            "vllm",
            "--model",
            "tiny:judge",
            "--max-queue",
            "8",
            "--dry-run",
        ],
        1,
        "--max-queue is the embedded server's",
    ),
    (
        "inspect --ground-truth with --input",
        lambda t, m: [
            "inspect",
            "reward",
            "--profile",
            "tiny-rule",
            "--input",
            str(_jsonl(t / "samples.jsonl", [{"prompt": "2+3?", "response": "#### 5"}])),
            "--ground-truth",
            "5",
        ],
        2,
        "--ground-truth goes with --prompt",
    ),
    # parity input rows of the wrong types
    (
        "parity prompt is a number",
        lambda t, m: _parity(t, [PAIR, {**PAIR, "prompt": 5}], m),
        2,
        "pairs.jsonl line 2: prompt must be a string or a list of {role, content} messages, got int 5",
    ),
    (
        "parity prompt is a list of strings",
        lambda t, m: _parity(t, [{**PAIR, "prompt": ["hi"]}], m),
        2,
        "line 1: prompt must be a string or a list of {role, content} messages, got list ['hi']",
    ),
    (
        "parity group_id is an object",
        lambda t, m: _parity(t, [PAIR, PAIR, {**PAIR, "group_id": {"a": 1}}], m),
        2,
        "line 3: group_id must be a string or an integer, got dict",
    ),
    (
        "parity response is a number",
        lambda t, m: _parity(t, [{**PAIR, "response": 5}], m),
        2,
        "line 1: response must be text, got int",
    ),
]


def _snapshot(root):
    return {
        str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest() if p.is_file() else "dir"
        for p in sorted(root.rglob("*"))
    }


@pytest.mark.parametrize(("setup", "code", "needle"), [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_bad_input_is_one_line_and_leaves_nothing_behind(tmp_path, monkeypatch, random_disrm_path, setup, code, needle):
    work = tmp_path / "work"
    work.mkdir()
    monkeypatch.chdir(work)  # default output folders (runs/, bench/) would land here
    args = setup(tmp_path, random_disrm_path)
    before = _snapshot(tmp_path)
    result = CliRunner().invoke(app, args)
    lines = [line for line in result.output.splitlines() if line.strip()]
    assert result.exit_code == code, result.output
    assert len(lines) == 1 and lines[0].startswith("error: "), result.output
    assert needle in lines[0]
    assert _snapshot(tmp_path) == before


@pytest.mark.parametrize(
    ("key", "needle"),
    [
        ("model", "model path '/xxxxxxxxxx"),  # model.path: checked on disk, where the OS refuses the name
        ("trainer", "trainer.total_steps: Input should be a valid integer"),  # a bad value repeated by the loader
    ],
)
def test_a_10_mb_value_is_refused_in_one_short_line(tmp_path, monkeypatch, key, needle):
    monkeypatch.chdir(tmp_path)
    huge = "/" + "x" * 10_000_000
    section = {"model": {"path": huge}, "trainer": {"total_steps": huge}}[key]
    profile = _write(tmp_path / "huge.yaml", json.dumps({"extends": "tiny-rule", key: section}))  # JSON is YAML
    result = CliRunner().invoke(app, ["train", "--profile", str(profile), "--console", "none", "--out", "run"])
    lines = [line for line in result.output.splitlines() if line.strip()]
    assert result.exit_code == 1, result.output[:500]
    assert len(lines) == 1 and lines[0].startswith("error: ") and needle in lines[0], lines[0][:500]
    assert "... (10000003 characters)" in lines[0]  # the quoted value's length and len(lines[0]) < 600, lines[0][:600]
    assert not (tmp_path / "run").exists()


def test_dry_run_ends_with_the_line_that_would_stop_the_run():
    # --dry-run "checks the inputs as a run would": synthetic settings that cannot make the splits passed it
    result = CliRunner().invoke(app, [*TRAIN, "--set", "data.synthetic.max_value=2", "--dry-run"])
    assert result.exit_code == 1
    assert result.output.strip().splitlines()[-1].startswith("error: cannot make 4096 distinct train problems")


def test_a_set_value_holding_a_hash_is_kept_whole():
    # YAML reads ` #...` as a comment: --set data.prompt_suffix=... cut the value there, silently
    from rlrm.config.loader import load_profile

    profile = load_profile("tiny-rule", ["data.prompt_suffix=Give the final answer after #### please"])
    assert profile.data.prompt_suffix == "Give the final answer after #### please"
    assert load_profile("tiny-rule", ["data.prompt_suffix=#### N"]).data.prompt_suffix == "#### N"


def test_launch_dry_run_shows_the_keys_variable_not_the_key(monkeypatch):
    # SGLang takes its key on the command line: --dry-run printed the key itself
    monkeypatch.setenv("MY_KEY", "s3cret-key")
    result = CliRunner().invoke(
        app,
        ["launch", "server", "--backend", "sglang", "--model", "tiny:judge", "--api-key-env", "MY_KEY", "--dry-run"],
    )
    assert result.exit_code == 0, result.output
    assert "s3cret-key" not in result.output and "--api-key '$MY_KEY'" in result.output


def test_launch_dry_run_of_the_embedded_server_serves_nothing():
    # --dry-run was read by vllm/sglang only: the embedded server started and served until killed
    result = CliRunner().invoke(app, ["launch", "server", "--model", "tiny:judge", "--port", "1", "--dry-run"])
    assert result.exit_code == 0, result.output
    assert result.output.startswith("would serve tiny:judge as genrm on http://127.0.0.1:1 with the embedded server")


def test_inspect_json_is_strict_json_when_a_reward_reports_nan(tmp_path):
    reward = tmp_path / "reward.py"
    reward.write_text("def compute_score(data_source, solution_str, ground_truth, extra_info):\n"
                      "    return {'score': 1.0, 'acc': float('nan')}\n")  # fmt: skip
    custom = ["--set", "reward.kind=custom", "--set", f"reward.custom.path={reward}"]
    args = ["inspect", "reward", "--profile", "tiny-rule", *custom, "--set", "reward.custom.isolation=thread"]
    result = CliRunner().invoke(
        app, [*args, "--prompt", "Kim has 2 pens and buys 6.", "--response", "#### 8", "--json"]
    )
    assert result.exit_code == 0, result.output

    def refuse(token):
        raise ValueError(f"not JSON: {token}")

    json.loads(result.stdout, parse_constant=refuse)  # before: a bare NaN
