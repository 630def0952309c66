"""The tiny models that ship with rlrm: what first use serves, and (slow) that the recipe rebuilds them."""

from __future__ import annotations

import filecmp
import json
from pathlib import Path

import pytest

from rlrm.engine.models.tiny import SHIPPED_DIR, SHIPPED_SEED, TINY_MODELS, model_dir, prepare_tiny, shipped_dir

# Where the rebuilt floats may differ (another torch version, CPU kernel set or CPU than the shipped build's
# `built_with`), the rebuild's held-out figures must stay this close to the shipped ones. The policy's greedy accuracy
# moves most: another CPU's rounding trains another policy (0.289 on an AMD EPYC against the shipped 0.359, both
# AVX512), so it is held to POLICY_TOLERANCE.
METRIC_TOLERANCE = 0.03
POLICY_TOLERANCE = 0.1
METRICS = {
    "policy": ("warm_start_accuracy",),
    "judge": ("auc", "auc_policy_samples", "auc_near_misses", "verdict_accuracy", "parsed", "adversarial_accuracy"),
    "disrm": ("auc", "auc_policy_samples", "auc_near_misses"),
    "tools": ("call_rate", "accuracy_without_tool"),
}


def _meta(path: Path) -> dict:
    return json.loads((path / "meta.json").read_text())


def test_every_tiny_model_ships_for_the_current_recipe():
    """A recipe version bump without rebuilt shipped files fails here, not as a minutes-long first run."""
    assert {p.name for p in SHIPPED_DIR.iterdir() if p.is_dir()} == {
        model_dir(name, SHIPPED_DIR, SHIPPED_SEED).name for name in TINY_MODELS
    }
    total = sum(f.stat().st_size for f in SHIPPED_DIR.rglob("*") if f.is_file())
    assert total < 12_000_000  # a few MB in the package
    assert set(METRICS) == set(TINY_MODELS)


def test_first_use_copies_the_shipped_files_without_building(tmp_path, monkeypatch):
    from transformers import AutoModelForCausalLM, AutoModelForSequenceClassification, AutoTokenizer

    import rlrm.engine.models.tiny as tiny

    def no_build(*args):
        raise AssertionError("built instead of copying the shipped files")

    for name in TINY_MODELS:
        monkeypatch.setitem(tiny._BUILDERS, name, no_build)
    lines = []
    paths = prepare_tiny(TINY_MODELS, cache_dir=tmp_path, log=lines.append)
    for name, path in paths.items():
        shipped = shipped_dir(name, SHIPPED_SEED)
        assert path == model_dir(name, tmp_path, SHIPPED_SEED)
        files = sorted(f.name for f in shipped.iterdir())
        assert {"model.safetensors", "config.json", "tokenizer.json", "meta.json"} <= set(files)
        match, mismatch, errors = filecmp.cmpfiles(shipped, path, files, shallow=False)
        assert match == files and not mismatch and not errors  # byte for byte what ships
        loader = AutoModelForSequenceClassification if name == "disrm" else AutoModelForCausalLM
        model = loader.from_pretrained(path)
        assert sum(p.numel() for p in model.parameters()) == _meta(path)["parameters"]
        assert AutoTokenizer.from_pretrained(path).eos_token == "<|im_end|>"
    assert all(line.startswith("copying shipped tiny") for line in lines)
    assert "building" not in " ".join(lines)


def test_a_finished_model_in_a_read_only_cache_is_used_without_a_lock(tmp_path, monkeypatch):
    # a baked container image or a read-only shared mount: the lock file could not be made, and every run refused
    # the cache ("models/.policy.lock: Permission denied") although the model was there, nothing to write
    import filelock

    prepare_tiny(["policy"], cache_dir=tmp_path, log=lambda line: None)

    def no_lock(*args, **kwargs):
        raise PermissionError(13, "Permission denied", str(tmp_path / ".policy.lock"))

    monkeypatch.setattr(filelock, "FileLock", no_lock)
    lines: list[str] = []
    paths = prepare_tiny(["policy"], cache_dir=tmp_path, log=lines.append)
    assert paths == {"policy": model_dir("policy", tmp_path, SHIPPED_SEED)} and lines == [
        f"tiny policy is ready at {paths['policy']}"
    ]
    with pytest.raises(PermissionError):  # a build still takes the lock
        prepare_tiny(["judge"], cache_dir=tmp_path, log=lambda line: None)


def test_force_and_other_seeds_build_from_the_recipe(tmp_path, monkeypatch):
    import rlrm.engine.models.tiny as tiny

    built = []

    def fake_build(dest, seed, log, root):  # stands in for the recipe: which path was taken is what is tested
        built.append(seed)
        dest.mkdir(parents=True)
        (dest / "meta.json").write_text(json.dumps({"seed": seed}))

    monkeypatch.setitem(tiny._BUILDERS, "policy", fake_build)
    lines = []
    prepare_tiny(("policy",), cache_dir=tmp_path, log=lines.append)  # shipped: copied
    prepare_tiny(("policy",), cache_dir=tmp_path, force=True, log=lines.append)  # rebuilt over the copy
    prepare_tiny(("policy",), cache_dir=tmp_path, seed=1, log=lines.append)  # not shipped: built
    assert built == [0, 1]
    assert [line.split(" tiny")[0] for line in lines] == ["copying shipped", "building", "building"]
    assert _meta(model_dir("policy", tmp_path, 0)) == {"seed": 0}
    # a lock per build, that every user of a shared cache may take: one per model name, made 0644 by the first
    # user, refused every other user's builds of that model (another seed, the next recipe version)
    lock = tmp_path / f".{model_dir('policy', tmp_path, 1).name}.lock"
    assert lock.is_file() and lock.stat().st_mode & 0o666 == 0o666
    assert not (tmp_path / ".policy.lock").exists()


def test_shipped_builds_meet_the_recipes_bars():
    """The figures each shipped build measured on held-out data (what the slow tier asks of a fresh build)."""
    meta = {name: _meta(shipped_dir(name, SHIPPED_SEED)) for name in TINY_MODELS}
    assert 0.05 <= meta["policy"]["warm_start_accuracy"] <= 0.6
    for name in ("judge", "disrm"):
        assert min(meta[name][k] for k in ("auc", "auc_policy_samples", "auc_near_misses")) >= 0.9
    assert meta["judge"]["verdict_accuracy"] >= 0.9 and meta["judge"]["parsed"] >= 0.95
    assert meta["tools"]["call_rate"] >= 0.2


@pytest.mark.slow
def test_the_recipe_reproduces_the_shipped_files(tmp_path):
    """Rebuild every tiny model from the recipe (minutes: `rlrm models prepare --force`) and compare.

    One build thread makes the floats independent of the core count, so with the torch version and CPU
    kernels of the shipped build (`built_with` in meta.json) every file matches byte for byte (meta.json
    apart from `build_s`). Elsewhere the tokenizer and configs still match byte for byte, and the held-out
    figures must stay within METRIC_TOLERANCE of the shipped ones.
    """
    paths = prepare_tiny(TINY_MODELS, cache_dir=tmp_path, force=True, log=lambda _: None)
    for name, path in paths.items():
        shipped = shipped_dir(name, SHIPPED_SEED)
        built, ships = _meta(path), _meta(shipped)
        files = sorted(f.name for f in shipped.iterdir() if f.name not in ("meta.json", "model.safetensors"))
        match, mismatch, errors = filecmp.cmpfiles(shipped, path, files, shallow=False)
        assert match == files, f"{name}: {mismatch + errors} differ from the shipped files"
        if built["built_with"] == ships["built_with"]:
            assert filecmp.cmp(shipped / "model.safetensors", path / "model.safetensors", shallow=False), name
            assert {k: v for k, v in built.items() if k != "build_s"} == {
                k: v for k, v in ships.items() if k != "build_s"
            }
        else:
            for key in METRICS[name]:
                tolerance = POLICY_TOLERANCE if key == "warm_start_accuracy" else METRIC_TOLERANCE
                assert built[key] == pytest.approx(ships[key], abs=tolerance), (name, key)
