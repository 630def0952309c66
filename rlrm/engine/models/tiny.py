"""Tiny offline models: built locally, cached, and loaded like any hub checkpoint.

    rlrm models prepare                      # tiny:policy, tiny:judge, tiny:disrm into ~/.cache/rlrm/models
    rlrm models prepare --name tools         # tiny:tools, the tool-use variant (the tiny-tools profile)
    rlrm models prepare --force              # rebuild from the recipe (minutes) instead of copying shipped files
    resolve_model_path("tiny:judge")         # -> that folder (copied or built on first use)

No hub can be reached where rlrm is built and tested, and nobody wants a 1 GB download for a
smoke run. A tiny model here is a BPE tokenizer trained on the synthetic task (with Qwen2's
pre-tokenizer, so `AutoTokenizer` loads it as a Qwen2 tokenizer) and a 0.6 M-parameter Qwen2
causal LM warm-started by a short supervised run, so it *means* something: some accuracy, and
clear headroom for RL. The reward models start from that policy (as real ones start from an SFT
model): `judge` is a causal LM for GenRM (`tiny_judge.py`), `disrm` a sequence classifier with one
score (`tiny_disrm.py`); each build measures its ROC AUC on held-out (problem, response) pairs and
writes it to meta.json. `tools` is the policy fine-tuned to call the calculator on operands too
large for it (`tiny_tools.py`); it records its tool-call rate and its accuracy without the tool.
Builds are deterministic for a seed and safe under concurrent callers.

The seed-0 builds ship with the package (`shipped/`, about 10 MB): first use copies them into the cache in
well under a second. Other seeds, and `--force`, build from the recipe. A slow test rebuilds them and checks
that the recipe reproduces the shipped files (tests/unit/engine/models/test_shipped_models.py).
"""

from __future__ import annotations

import errno
import json
import os
import shutil
import sys
import time
from functools import partial
from pathlib import Path
from typing import Callable

from rlrm.engine.models.sft import BUILD_THREADS, built_with, fixed_threads
from rlrm.engine.models.tiny_disrm import build_disrm
from rlrm.engine.models.tiny_judge import JUDGE_RECIPE_VERSION, build_judge
from rlrm.engine.models.tiny_policy import build_tokenizer, new_policy, warm_start
from rlrm.engine.models.tiny_tools import TOOLS_RECIPE_VERSION, build_tools_policy
from rlrm.errors import ModelError
from rlrm.inference.loading import check_model_path

RECIPE_VERSION = 3  # bump when the recipe changes, so cached builds are rebuilt
# A model whose recipe changes on its own gets its own version (only it rebuilds); the rest share RECIPE_VERSION.
OWN_RECIPE_VERSIONS = {"tools": TOOLS_RECIPE_VERSION, "judge": JUDGE_RECIPE_VERSION}
TINY_MODELS = ("policy", "judge", "disrm", "tools")
DEFAULT_MODELS = ("policy", "judge", "disrm")  # what `rlrm models prepare` builds without --name
SHIPPED_DIR = Path(__file__).parent / "shipped"  # the seed-0 builds, as `prepare_tiny` writes them
SHIPPED_SEED = 0


def default_cache_dir() -> Path:
    """$RLRM_MODELS_DIR, else ~/.cache/rlrm/models."""
    env = os.environ.get("RLRM_MODELS_DIR")
    return Path(env).expanduser() if env else Path.home() / ".cache" / "rlrm" / "models"


def recipe_version(name: str) -> int:
    """The version of `name`'s recipe: its own where it has one, else the shared RECIPE_VERSION."""
    return OWN_RECIPE_VERSIONS.get(name, RECIPE_VERSION)


def model_dir(name: str, cache_dir: Path | None = None, seed: int = 0) -> Path:
    return Path(cache_dir or default_cache_dir()) / f"{name}-v{recipe_version(name)}-seed{seed}"


def shipped_dir(name: str, seed: int = 0) -> Path | None:
    """The shipped build of `name` for `seed` and the current recipe, or None (only seed 0 ships)."""
    path = model_dir(name, SHIPPED_DIR, seed)
    return path if (path / "meta.json").is_file() else None


def prepare_tiny(
    names=TINY_MODELS,
    cache_dir: Path | None = None,
    seed: int = 0,
    force: bool = False,
    log: Callable[[str], None] = print,
) -> dict[str, Path]:
    """Build (or reuse) tiny models.

    Args:
        names: which tiny models (see TINY_MODELS).
        cache_dir: where they live (default: `default_cache_dir()`).
        seed: build seed; the same seed gives the same weights.
        force: build from the recipe even when a complete build exists or ships with rlrm.
        log: receives progress lines.

    Returns:
        name -> folder loadable with `from_pretrained`.
    """
    from filelock import FileLock

    unknown = [n for n in names if n not in TINY_MODELS]
    if unknown:
        raise ModelError(f"unknown tiny model {unknown[0]!r}; available: {', '.join(TINY_MODELS)}")
    root = Path(cache_dir or default_cache_dir())
    root.mkdir(parents=True, exist_ok=True)
    out = {}
    for name in names:
        final = model_dir(name, root, seed)
        if not force and (final / "meta.json").is_file():  # finished builds are renamed into place whole
            log(f"tiny {name} is ready at {final}")  # no lock: a read-only cache (an image, a shared mount) serves
            out[name] = final
            continue
        # One builder at a time; later callers wait, then find the finished folder.
        # a lock per build, which every user of a shared cache may take (filelock leaves it, with its maker's mode)
        with FileLock(str(root / f".{final.name}.lock"), mode=0o666):
            for stale in root.glob(f".{final.name}.tmp-*"):  # left by a build that was killed
                if not _builder_alive(stale):  # an older rlrm's build takes another lock: its folder is left alone
                    shutil.rmtree(stale, ignore_errors=True)
            if force or not (final / "meta.json").is_file():
                tmp = root / f".{final.name}.tmp-{os.getpid()}"
                shipped = None if force else shipped_dir(name, seed)
                try:
                    if shipped is not None:
                        log(f"copying shipped tiny {name} (seed {seed}) into {final}")
                        _copy_files(shipped, tmp)
                    else:
                        log(f"building tiny {name} (seed {seed}) into {final}")
                        _BUILDERS[name](tmp, seed, log, root)
                except BaseException:  # Ctrl-C mid-build: the build there was (--force) stays, nothing half-made
                    shutil.rmtree(tmp, ignore_errors=True)
                    raise
                shutil.rmtree(final, ignore_errors=True)
                tmp.rename(final)
            else:
                log(f"tiny {name} is ready at {final}")
        out[name] = final
    return out


def _builder_alive(tmp: Path) -> bool:
    """Whether another process whose pid ends a build folder's name (`.policy-v3-seed0.tmp-1234`) still runs; one
    with this process's pid is a leftover of an earlier process that had it (containers reuse pids)."""
    try:
        pid = int(tmp.name.rsplit("-", 1)[1])
        if pid == os.getpid():
            return False
        os.kill(pid, 0)
    except (ValueError, ProcessLookupError):
        return False
    except PermissionError:  # another user's process: it runs
        pass
    return True


def _copy_files(src: Path, dest: Path) -> None:
    """Copy a flat model folder's files, not their modes: an installed package may be read-only."""
    dest.mkdir(parents=True)
    for path in src.iterdir():
        try:
            shutil.copyfile(path, dest / path.name)
        except OSError as exc:  # on a full disk shutil names the source: the folder to free is the destination's
            if exc.errno not in (errno.ENOSPC, errno.EDQUOT, errno.EIO, errno.EROFS):
                raise
            raise OSError(exc.errno, exc.strerror, str(dest / path.name)) from exc


def resolve_model_path(path: str, cache_dir: Path | None = None) -> str:
    """`tiny:NAME` -> the prepared folder (copied or built on first use); local paths are checked; hub ids pass."""
    if path.startswith("tiny:"):
        name = path.removeprefix("tiny:")
        return str(prepare_tiny((name,), cache_dir=cache_dir, log=_build_notice)[name])
    return check_model_path(path, hint=f" or tiny:NAME ({', '.join(TINY_MODELS)})")


def _build_notice(line: str) -> None:
    """A model built on first use (not shipped: a seed other than 0) takes minutes: say so, then show its progress
    (step, loss, time so far and left, at least every 10 s) on stderr."""
    if line.startswith("building"):
        print(f"{line} (first use; `rlrm models prepare` builds ahead of time)", file=sys.stderr, flush=True)
    elif " step " in line and "left)" in line:
        print(line, file=sys.stderr, flush=True)


def summary(name: str, path: Path) -> str:
    """One line about a prepared model from its meta.json: what it measured on held-out data."""
    meta = json.loads((Path(path) / "meta.json").read_text())
    if name == "policy":
        return f"held-out greedy accuracy {meta['warm_start_accuracy']:.3f}"
    if name == "tools":
        return (
            f"held-out tool-call rate {meta['call_rate']:.3f}, "
            f"greedy accuracy without the tool {meta['accuracy_without_tool']:.3f}"
        )
    line = (
        f"held-out ROC AUC {meta['auc']:.3f} "
        f"(policy samples {meta['auc_policy_samples']:.3f}, near misses {meta['auc_near_misses']:.3f})"
    )
    return line + (f", verdict accuracy {meta['verdict_accuracy']:.3f}" if "verdict_accuracy" in meta else "")


def _build_policy(dest: Path, seed: int, log: Callable[[str], None], root: Path) -> None:
    from transformers.utils import logging as hf_logging

    hf_logging.disable_progress_bar()

    start = time.perf_counter()
    with fixed_threads(BUILD_THREADS):  # so the build's float reductions and thus weights are reproducible
        tokenizer = build_tokenizer(seed)
        model = new_policy(tokenizer, seed)
        accuracy = warm_start(model, tokenizer, seed, log)
    dest.mkdir(parents=True)
    model.save_pretrained(dest)
    tokenizer.save_pretrained(dest)
    meta = {
        "recipe_version": RECIPE_VERSION,
        "seed": seed,
        "parameters": sum(p.numel() for p in model.parameters()),
        "warm_start_accuracy": accuracy,
        "build_s": round(time.perf_counter() - start, 1),
        "built_with": built_with(),
    }
    (dest / "meta.json").write_text(json.dumps(meta, indent=2))
    log(f"tiny policy: {meta['parameters']:,} parameters, held-out greedy accuracy {accuracy:.3f}, {meta['build_s']} s")


def _build_variant(name: str, dest: Path, seed: int, log: Callable[[str], None], root: Path) -> None:
    """Build the judge, the DisRM or the tool-use variant from the same-seed policy (prepared first if needed)."""
    variants: dict[str, Callable[[Path, int, Callable[[str], None], Path], dict]] = {
        "judge": build_judge,
        "disrm": build_disrm,
        "tools": build_tools_policy,
    }
    build = variants[name]

    policy_dir = prepare_tiny(("policy",), cache_dir=root, seed=seed, log=log)["policy"]
    metrics = build(dest, seed, log, policy_dir)
    meta = {"recipe_version": recipe_version(name), "seed": seed, "policy": policy_dir.name, **metrics}
    (dest / "meta.json").write_text(json.dumps(meta, indent=2))


_BUILDERS: dict[str, Callable[[Path, int, Callable[[str], None], Path], None]] = {
    "policy": _build_policy,
    "judge": partial(_build_variant, "judge"),
    "disrm": partial(_build_variant, "disrm"),
    "tools": partial(_build_variant, "tools"),
}
