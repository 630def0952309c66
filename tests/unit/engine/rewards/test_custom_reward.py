"""Custom reward functions called in process: async functions with optional keywords, and bad settings named."""

from __future__ import annotations

import asyncio

import pytest

from rlrm.config.reward import RewardConfig
from rlrm.engine.rewards.base import RewardSample
from rlrm.engine.rewards.factory import build_reward_fn
from rlrm.engine.rewards.loop import RewardLoop
from rlrm.errors import ConfigError

SAMPLE = RewardSample(
    uid="p0",
    index=0,
    data_source="synthetic",
    prompt=[{"role": "user", "content": "q"}],
    solution_str="abcdef #### 4",
    ground_truth="4",
    extra_info={"k": 1},
)


def write(tmp_path, source: str):
    path = tmp_path / "my_reward.py"
    path.write_text(source)
    return path


def score(cfg: RewardConfig):
    loop = RewardLoop(build_reward_fn(cfg), cfg)
    result = asyncio.run(loop.score(SAMPLE))
    return result, loop.take_metrics()


def test_async_function_with_a_name_and_optional_keywords(tmp_path):
    path = write(
        tmp_path,
        "async def judge(data_source, solution_str, ground_truth, extra_info, reward_router_address=1):\n"
        "    return 2.0 if reward_router_address is None else -1.0\n",
    )
    result, _ = score(RewardConfig(kind="custom", custom={"path": str(path), "name": "judge"}))
    assert result.score == 2.0


def test_bad_custom_settings_are_named(tmp_path):
    with pytest.raises(ValueError, match="needs reward.custom.path"):
        RewardConfig(kind="custom")
    with pytest.raises(ValueError, match="is not a Python file"):
        RewardConfig(kind="custom", custom={"path": str(tmp_path / "missing.py")})
    path = write(tmp_path, "def other(*a):\n    return 1.0\n")
    with pytest.raises(ConfigError, match="'compute_score' is not a function in .*functions there: other"):
        build_reward_fn(RewardConfig(kind="custom", custom={"path": str(path)}))
    with pytest.raises(ValueError, match=r"reward.custom.path is set but reward.kind is rule.*reward.kind=custom"):
        RewardConfig(custom={"path": str(path)})  # verl's habit: the path alone; rlrm would score by rule


def _thread(path, **custom):
    return RewardConfig(kind="custom", custom={"path": str(path), "isolation": "thread", **custom})


@pytest.mark.parametrize(
    "signature",
    [
        "solution_str, ground_truth, data_source=None, extra_info=None",  # verl's names in another order
        "data_source, solution_str, ground_truth, extra_info=None, **kwargs",
        "solution_str, ground_truth, **kwargs",  # verl passes every argument by name: the rest land in kwargs
    ],
)
def test_verl_names_in_any_order_are_passed_by_name(tmp_path, signature):
    path = write(
        tmp_path,
        f"def compute_score({signature}):\n"
        "    return {'score': float(solution_str.endswith(ground_truth)), 'seen': solution_str}\n",
    )
    result, _ = score(_thread(path))
    assert result.score == 1.0 and result.extra["seen"] == SAMPLE.solution_str


def test_other_names_are_passed_by_position_in_verls_order(tmp_path):
    path = write(tmp_path, "def compute_score(src, text, truth, info):\n    return float(text.endswith(truth))\n")
    result, _ = score(_thread(path))
    assert result.score == 1.0


def test_a_function_taking_kwargs_gets_no_router_address_without_a_server(tmp_path):
    # verl passes it only when a router is up: a function forwarding its **kwargs to a helper that takes none
    # (verl's gsm8k.compute_score(solution_str, ground_truth, **kwargs)) failed on every sample
    (tmp_path / "gsm8k_helper_of_this_test.py").write_text(
        "def check(solution_str, ground_truth, method='strict'):\n    return float(solution_str.endswith(ground_truth))\n"
    )
    path = write(
        tmp_path,
        "from gsm8k_helper_of_this_test import check\n\n"  # a helper module beside the file, as verl users import theirs
        "def compute_score(data_source, solution_str, ground_truth, extra_info=None, **kwargs):\n"
        "    return {'score': check(solution_str, ground_truth, **kwargs), 'got': sorted(kwargs)}\n",
    )
    result, _ = score(_thread(path))
    assert result.score == 1.0 and result.extra["got"] == []  # with a reward server up: the address


def test_verls_own_scorer_named_as_the_function_is_refused_not_called_with_shifted_arguments(tmp_path):
    # verl's gsm8k.compute_score(solution_str, ground_truth, method, ...): by position it got the data source as the
    # response and the response as the ground truth, and failed (or scored 0) on every sample
    path = write(
        tmp_path, "def compute_score(solution_str, ground_truth, method='strict', format_score=0.0):\n    return 0.0\n"
    )
    with pytest.raises(
        ConfigError, match=r"takes solution_str as its parameter 1, where verl's arguments put data_source"
    ):
        build_reward_fn(_thread(path))


def test_a_function_that_cannot_take_verls_four_arguments_is_refused(tmp_path):
    path = write(tmp_path, "def compute_score(text, truth):\n    return 0.0\n")
    with pytest.raises(
        ConfigError, match=r"cannot be called as compute_score\(data_source, solution_str, ground_truth"
    ):
        build_reward_fn(_thread(path))


@pytest.mark.parametrize("kind", ["def", "async def"])
def test_a_generator_is_refused_at_start(tmp_path, kind):
    # it failed every sample with "returned generator ... return a float", after the model and servers started
    path = write(
        tmp_path, f"{kind} compute_score(data_source, solution_str, ground_truth, extra_info):\n    yield 1.0\n"
    )
    with pytest.raises(ConfigError, match=r"compute_score in .* is a generator \(it yields\): return its score"):
        build_reward_fn(_thread(path))


def test_a_raised_error_names_its_sample(tmp_path):
    path = write(
        tmp_path, "def compute_score(data_source, solution_str, ground_truth, extra_info):\n    return {}['answer']\n"
    )
    cfg = RewardConfig(kind="custom", custom={"path": str(path), "isolation": "thread"}, on_failure="default")
    result, _ = score(cfg)
    assert result.extra["reward_error"] == "reward function compute_score raised KeyError: 'answer' (sample p0)"


@pytest.mark.parametrize(
    ("returned", "expected"),
    [("numpy.float32(0.5)", 0.5), ("numpy.int64(2)", 2.0), ("torch.tensor(0.25)", 0.25), ("numpy.array(3.0)", 3.0)],
)
def test_numpy_scalars_and_0d_tensors_are_scores_as_in_a_dict(tmp_path, returned, expected):
    path = write(tmp_path, f"import numpy, torch\n\ndef compute_score(*args):\n    return {returned}\n")
    result, metrics = score(_thread(path))
    assert result.score == expected and metrics["reward/failures"] == 0


@pytest.mark.parametrize(
    "returned",
    [
        "True",
        "numpy.bool_(True)",
        "{'score': numpy.bool_(True)}",
        "torch.tensor(True)",
        "numpy.array('abc')",
        "'0.5'",
        "torch.tensor([1.0, 2.0])",
        "1e39",
        "-1e39",
        "{'score': 1.0, 'reward_components': {'a': 1e39}}",
    ],
)
def test_bools_text_vectors_and_scores_beyond_float32_are_counted_failures(tmp_path, returned):
    path = write(tmp_path, f"import numpy, torch\n\ndef compute_score(*args):\n    return {returned}\n")
    cfg = _thread(path)
    cfg.on_failure, cfg.max_retries = "default", 0
    result, metrics = score(cfg)
    assert metrics["reward/failures"] == 1 and result.score == cfg.default_score
    if "e39" in returned:
        assert metrics["reward/nonfinite"] == 1


def test_a_reward_file_with_dataclasses_and_pickled_helpers_imports_as_python_would(tmp_path):
    # the module was never put in sys.modules: a @dataclass under `from __future__ import annotations` failed to
    # import ("'NoneType' object has no attribute '__dict__'"), and pickle could not find the file's functions
    import textwrap

    from rlrm.engine.rewards.custom import load_function

    path = tmp_path / "my_reward.py"
    path.write_text(
        textwrap.dedent(
            """
            from __future__ import annotations
            import pickle
            from dataclasses import dataclass

            @dataclass
            class Parsed:
                answer: str | None

            def _same(x):
                return x

            def compute_score(data_source, solution_str, ground_truth, extra_info):
                answer = pickle.loads(pickle.dumps(_same))(Parsed(solution_str.strip()).answer)
                return float(answer == ground_truth)
            """
        )
    )
    assert load_function(str(path), "compute_score")("d", "42", "42", {}) == 1.0


def test_a_reward_file_that_fails_to_import_leaves_no_module_behind(tmp_path):
    import sys

    from rlrm.engine.rewards.custom import load_function

    path = tmp_path / "broken.py"
    path.write_text("raise RuntimeError('not today')\n")
    before = set(sys.modules)
    with pytest.raises(ConfigError, match="failed to import: RuntimeError: not today"):
        load_function(str(path), "compute_score")
    assert set(sys.modules) == before


def test_two_user_files_with_a_same_named_helper_beside_each_import_their_own(tmp_path):
    # a reward in rewards/ and a tool in tools/, each with its own helpers.py: the second got the first's cached
    # module; and the folders stay off sys.path once imported
    import sys

    from rlrm.user_code import import_file

    modules = []
    for name, value in (("rewards", 1), ("tools", 2)):
        folder = tmp_path / name
        folder.mkdir()
        (folder / "helpers_of_two_files.py").write_text(f"VALUE = {value}\n")
        (folder / "user.py").write_text("from helpers_of_two_files import VALUE\n")
        modules.append(import_file(folder / "user.py", f"rlrm_test_user_{name}", f"file {name}"))
        assert str(folder) not in sys.path
    assert [m.VALUE for m in modules] == [1, 2]


ASYNC_FORMS = """
import asyncio, functools

class Judge:
    async def __call__(self, data_source, solution_str, ground_truth, extra_info):
        await asyncio.sleep(0)
        return 0.75

judge = Judge()

def logged(f):
    @functools.wraps(f)
    def wrapper(*a, **k):
        return f(*a, **k)
    return wrapper

@logged
async def compute_score(data_source, solution_str, ground_truth, extra_info):
    await asyncio.sleep(0)
    return 0.75

async def _judged(data_source, solution_str, ground_truth, extra_info):
    return 0.75

@functools.wraps(_judged)
def bridge(*args, **kwargs):  # verl users' sync bridge over an async judge
    return asyncio.run(_judged(*args, **kwargs))
"""


@pytest.mark.parametrize(  # auto runs a plain function in a worker process: the integration tier's (test_reward_isolation)
    ("name", "isolation"), [("judge", "thread"), ("judge", "auto"), ("compute_score", "thread"), ("bridge", "thread")]
)
def test_async_functions_behind_a_call_or_a_decorator_are_awaited(tmp_path, name, isolation):
    # an object with `async def __call__`, or an async def under a plain functools.wraps decorator: called as a plain
    # function, its coroutine failed every sample as a wrong return value ("returned coroutine for sample p0"); a sync
    # bridge (asyncio.run inside) is no async function: run on a loop, its asyncio.run would fail
    path = write(tmp_path, ASYNC_FORMS)
    cfg = RewardConfig(
        kind="custom", custom={"path": str(path), "name": name, "isolation": isolation}, on_failure="default"
    )
    result, _ = score(cfg)
    assert not result.extra.get("reward_failed"), result.extra.get("reward_error")
    assert result.score == 0.75
