"""Shared test setup: one torch thread, an offline model cache inside the repo, tiny models built once."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
# Tiny models are deterministic and versioned by recipe, so one cache serves every test session.
os.environ.setdefault("RLRM_MODELS_DIR", str(REPO / ".cache" / "models"))
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.pop("RLRM_DEBUG", None)
# the stand-in servers and shared settings of tests/fixtures/ import by name (`from small_run import SMALL_RUN`)
sys.path.insert(0, str(REPO / "tests" / "fixtures"))


def pytest_configure(config):
    import torch

    torch.set_num_threads(1)


@pytest.fixture(scope="session")
def tiny_policy_path() -> Path:
    """The prepared tiny policy (built on first use, then reused)."""
    from rlrm.engine.models.tiny import resolve_model_path

    return Path(resolve_model_path("tiny:policy"))


@pytest.fixture(scope="session")
def tiny_tools_path(tiny_policy_path) -> Path:
    """The prepared tiny tools policy (tiny:tools, built on first use, then reused)."""
    from rlrm.engine.models.tiny import resolve_model_path

    return Path(resolve_model_path("tiny:tools"))


@pytest.fixture(scope="session")
def random_disrm_path(tmp_path_factory, tiny_policy_path) -> Path:
    """A randomly initialised Qwen2 sequence classifier (num_labels=1) with the tiny tokenizer."""
    return _random_disrm(tmp_path_factory.mktemp("disrm"), tiny_policy_path)


@pytest.fixture(scope="session")
def spread_disrm_path(tmp_path_factory, tiny_policy_path) -> Path:
    """A random Qwen2 DisRM initialised with std 0.2 (instead of 0.02), so that, like a trained reward
    model and unlike `random_disrm_path` (whose scores are nearly constant), its scores separate the
    samples by far more than bf16 rounding moves them. 64 positions: long conversations get truncated."""
    return _random_disrm(tmp_path_factory.mktemp("spread-disrm"), tiny_policy_path, initializer_range=0.2)


def _random_disrm(path: Path, tokenizer_path: Path, **config) -> Path:
    """A one-layer random Qwen2 DisRM (64 positions) with the tiny tokenizer, saved into `path`."""
    import torch
    from transformers import AutoTokenizer, Qwen2Config, Qwen2ForSequenceClassification

    tok = AutoTokenizer.from_pretrained(tokenizer_path)
    torch.manual_seed(0)
    model_config = Qwen2Config(
        vocab_size=len(tok),
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=1,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=64,
        num_labels=1,
        pad_token_id=tok.pad_token_id,
        **config,
    )
    Qwen2ForSequenceClassification(model_config).save_pretrained(path)
    tok.save_pretrained(path)
    return path


@pytest.fixture(scope="session")
def arithmetic_conversations() -> list[tuple[str, str, list[dict], str]]:
    """(sample id, group id, prompt messages, response): 6 synthetic problems x 4 responses in the
    policy's format: the right answer and near misses (a wrong final answer, a wrong sum) and a long
    answer that a 64-position model truncates, so every group has something to rank."""
    from rlrm.config.schema import PROMPT_SUFFIX, SyntheticConfig
    from rlrm.engine.data.synthetic import synthetic_splits

    train, _ = synthetic_splits(SyntheticConfig(num_train=6, num_test=1, max_value=10), PROMPT_SUFFIX)
    rows = []
    for ex in train:
        equation = ex.extra_info["solution"].split(" = ")[0]
        answer = int(ex.ground_truth)
        responses = [
            f"{equation} = {answer}\n#### {answer}",
            f"{equation} = {answer}\n#### {answer + 2}",
            f"{equation} = {answer + 1}\n#### {answer + 1}",
            f"{equation} = {answer}. Check it again: {equation} = {answer}.\n#### {answer}",  # long: over 64 tokens
        ]
        rows += [(f"{ex.uid}#{j}", ex.uid, ex.prompt, response) for j, response in enumerate(responses)]
    return rows


@pytest.fixture(scope="session")
def arithmetic_samples(arithmetic_conversations) -> list:
    """6 GRPO groups of 4 (`arithmetic_conversations` above) as parity samples."""
    from rlrm.parity.inputs import ParitySample

    return [ParitySample(*row) for row in arithmetic_conversations]


@pytest.fixture(scope="session")
def input_file(tmp_path_factory, arithmetic_samples):
    """`arithmetic_samples` as the JSONL file `rlrm parity disrm --input` reads."""
    import json

    path = tmp_path_factory.mktemp("parity-in") / "samples.jsonl"
    rows = [
        {"prompt": s.prompt, "response": s.response, "group_id": s.group_id, "sample_id": s.sample_id}
        for s in arithmetic_samples
    ]
    path.write_text("\n".join(json.dumps(r) for r in rows))
    return path


@pytest.fixture(scope="session")
def folders(tmp_path_factory) -> dict[str, Path]:
    """Small synthetic run, benchmark and parity folders (rlrm/report/synthetic.py), built once per session."""
    from rlrm.report.synthetic import write_bench, write_parity, write_run

    root = tmp_path_factory.mktemp("report-inputs")
    return {
        "a": write_run(root / "a", steps=12, mode="sync", seed=0),
        "b": write_run(root / "b", steps=10, mode="stream", seed=1),
        "bench": write_bench(root / "bench", modes=("sync", "stream", "one-step-off"), repeats=2, steps=5),
        "parity": write_parity(root / "parity", groups=12, n=4, train_steps=6),
    }


@pytest.fixture
def notes() -> list[str]:
    return []


def pytest_collection_modifyitems(config, items):
    """`gpu` tests are skipped without a CUDA device; `vllm` tests run on the real engine when its environment is
    found (rlrm/launch/fleet/engine_env.py) and are skipped otherwise, unless RLRM_REQUIRE_VLLM=1 (CI: .ci/run),
    where a missing engine fails them. In pytest-xdist's workers (`-n 2`) the longest work comes first."""
    _skip_gpu_tests_without_cuda(items)
    if hasattr(config, "workerinput"):  # a pytest-xdist worker: its collection order is the order work is handed out
        items.sort(key=_work_order)
    marked = [item for item in items if "vllm" in item.keywords]
    if not marked:
        return
    from rlrm.launch.fleet.engine_env import EngineNotFound, find_engine

    try:
        find_engine("vllm")
        return
    except EngineNotFound as exc:
        missing = str(exc)
    if os.environ.get("RLRM_REQUIRE_VLLM") == "1":
        config.stash[_VLLM_MISSING] = missing  # each test fails in its setup (pytest_runtest_setup)
        return
    for item in marked:
        item.add_marker(pytest.mark.skip(reason=f"no vLLM engine: {missing}"))


_VLLM_MISSING = pytest.StashKey[str]()
# With `-n 2` (pytest-xdist, the README's test command) a worker takes a whole test file at a time, so a module's
# fixtures (a server, a trained run) start once, and the vLLM tests as one unit, so the session's vLLM replicas
# start once. The vLLM unit goes first and the unit files last: the longest work starts at once, many short
# files fill in at the end.
_VLLM_TESTS = "tests/integration/launch/on_vllm/"
_ORDER = ("vllm", "tests/integration/", "tests/docs/", "tests/")


def _unit_of_work(nodeid: str) -> str:
    path = nodeid.split("::")[0]
    return "vllm" if path.startswith(_VLLM_TESTS) else path


def _work_order(item) -> int:
    unit = _unit_of_work(item.nodeid)
    return next((i for i, prefix in enumerate(_ORDER) if unit.startswith(prefix)), len(_ORDER))


@pytest.hookimpl(optionalhook=True, tryfirst=True)  # a pytest-xdist hook: without the plugin, never called
def pytest_xdist_make_scheduler(config, log):
    from xdist.scheduler import LoadScopeScheduling

    class ByFile(LoadScopeScheduling):
        def _split_scope(self, nodeid: str) -> str:
            return _unit_of_work(nodeid)

    if config.getvalue("dist") != "load":  # -n alone means "load"; a --dist asked for by name is xdist's own
        return None
    config.option.loadscopereorder = False  # hand the units out in the workers' collection order (above)
    return ByFile(config, log)


def pytest_runtest_setup(item):
    missing = item.config.stash.get(_VLLM_MISSING, None)
    if missing and "vllm" in item.keywords:
        pytest.fail(f"RLRM_REQUIRE_VLLM=1 but {missing}", pytrace=False)


def _skip_gpu_tests_without_cuda(items) -> None:
    gpu = [item for item in items if "gpu" in item.keywords]
    if not gpu:
        return
    import torch

    if not torch.cuda.is_available() and os.environ.get("RLRM_GPU_TIER_DEVICE", "cuda") == "cuda":
        for item in gpu:
            item.add_marker(
                pytest.mark.skip(reason="gpu tier: no CUDA device visible (run it with pytest -m gpu on a GPU)")
            )


_GPU_DESELECTED = pytest.StashKey[int]()


def pytest_deselected(items):
    """Count the gpu tier's tests a `-m` expression left out (in each xdist worker, or the one process)."""
    if items:
        config = items[0].config
        config.stash[_GPU_DESELECTED] = config.stash.get(_GPU_DESELECTED, 0) + sum("gpu" in i.keywords for i in items)


def pytest_sessionfinish(session):
    if hasattr(session.config, "workeroutput"):  # an xdist worker: its count goes to the controller
        session.config.workeroutput["gpu_deselected"] = session.config.stash.get(_GPU_DESELECTED, 0)


@pytest.hookimpl(optionalhook=True)
def pytest_testnodedown(node, error):
    """xdist's controller collects nothing itself: every worker collects the whole suite, so take their largest."""
    count = getattr(node, "workeroutput", {}).get("gpu_deselected", 0)
    node.config.stash[_GPU_DESELECTED] = max(node.config.stash.get(_GPU_DESELECTED, 0), count)


def pytest_terminal_summary(terminalreporter, exitstatus, config):
    """Name the gpu tier when this run left it out, so a CPU run says what it did not check."""
    deselected = config.stash.get(_GPU_DESELECTED, 0)
    if deselected:
        terminalreporter.write_line(
            f"gpu tier: {deselected} tests deselected in this run; on a CUDA machine: "
            "python -m pytest -m gpu, or bash scripts/gpu_check.sh"
        )
