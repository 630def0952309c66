"""The wheels an offline GPU machine lacks for the device check, fetched here into .whl/ and checked.

    .venv/bin/python scripts/gpu_wheels.py [--dest .whl] [--have FILE] [--check-only]

The lent GPU machines (docs/development.md, "The device check") hold torch, transformers 5.17, accelerate, aiohttp,
pandas, pyarrow, typer, rich, pytest and more, but not rlrm's serving and data packages nor TRL, and they reach no
package registry. This empties --dest of wheels and fetches those as wheels for CPython 3.12 on x86-64 Linux, at the versions the
interpreter running it has installed (run it with .venv/bin/python), but datasets 5.0.0 and trl 1.16.0 (PINNED
below), then reads every wheel's
requirements and names any that neither the machine (`--have`: one package name a line; default: the list read
off such a machine on 2026-11-17) nor the fetched wheels provide, or whose version range the fetched wheel misses.
Exit 1 when one is missing. On the GPU machine, from the checkout:

    python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .whl/*.whl
    export PYTHONPATH=/tmp/site:$PWD RLRM_PYTHON=python3
    bash scripts/gpu_check.sh ...
"""

from __future__ import annotations

import argparse
import importlib.metadata
import re
import subprocess
import sys
import zipfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
# what the device check imports that the machine lacks (seen on an H100 and an H200 of this workplace, 2026-11)
WANTED = (
    "pydantic",
    "pydantic-core",
    "annotated-types",
    "typing-inspection",
    "fastapi",
    "starlette",
    "uvicorn",
    "orjson",
    "sglang-router",
    "setproctitle",
    "opentelemetry-api",
    "importlib-metadata",
    "typing-extensions",  # pydantic asks >=4.16; the machine's version is not known, so this one shadows it
    "datasets",
    "dill",
    "multiprocess",
    "trl",
)
PINNED = {
    "trl": "1.16.0",  # not in rlrm's environment: the version benchmarks/step_vs_trl.py was measured with
    "datasets": "5.0.0",  # asks pyarrow>=21 of the machine, as trl does (5.1 and later ask >=24; its version is not known)
}
# the image's packages (KINDS.md of the device tool, read off a machine on 2026-11-17), with its versions where known
MACHINE = {
    "huggingface-hub": "1.33.0",
    "transformers": "5.17.0",
    "accelerate": "1.15.0",
    "torch": "2.11.0",
    "numpy": "2.5.2",
    "tokenizers": "0.23.2",
    "safetensors": "0.8.0",
}
MACHINE_NAMES = """absl-py accelerate aiofiles aiohappyeyeballs aiohttp aiosignal annotated-doc anyio attrs botorch build certifi
charset-normalizer chex click cloudpickle cmake colorama contourpy coverage cuda-bindings cuda-core
cuda-pathfinder cuda-toolkit cupy-cuda13x cycler cython diffrax e3nn einops equinox etils execnet filelock
flatbuffers flax fonttools formulaic frozenlist fsspec gpytorch grpcio h11 h5py hf-xet httpcore httpx
huggingface-hub humanize hypothesis idna imageio iniconfig interface-meta jax jax-cuda13-pjrt jax-cuda13-plugin
jaxlib jaxtyping jinja2 joblib kiwisolver lazy-loader lightning lightning-utilities linear-operator lineax
llvmlite lxml markdown markdown-it-py markupsafe matplotlib mdurl meson ml-dtypes mpi4py mpmath msgpack
multidict multipledispatch mypy-extensions nanobind narwhals networkx ninja numba numba-cuda numpy numpyro
nvidia-cublas nvidia-cuda-cupti nvidia-cuda-nvrtc nvidia-cuda-runtime nvidia-cudnn-cu13 nvidia-cufft
nvidia-cufile nvidia-curand nvidia-cusolver nvidia-cusparse nvidia-cusparselt-cu13 nvidia-ml-py
nvidia-nccl-cu13 nvidia-nvjitlink nvidia-nvshmem-cu13 nvidia-nvtx onnx onnx-ir onnxruntime onnxscript
opencv-python-headless optax opt-einsum opt-einsum-fx optimistix orbax-checkpoint packaging pandas pathspec
patsy peft pillow pip pluggy portalocker prometheus-client propcache protobuf psutil pyarrow pybind11
py-cpuinfo pygments pyparsing pyproject-hooks pyre-extensions pytest pytest-benchmark pytest-cov pytest-mock
pytest-timeout pytest-xdist python-dateutil pytorch-lightning pyyaml regex requests rich sacrebleu safetensors
scikit-build-core scikit-image scikit-learn scipy seaborn sentencepiece sentence-transformers setuptools
shellingham simplejson six sortedcontainers statsmodels sympy tabulate tensorboard tensorboard-data-server
tensorstore threadpoolctl tifffile tiktoken timm tokenizers toolz torch torchaudio torchdiffeq torch-geometric
torchmetrics torchvision tqdm transformers treescope triton typer typing-extensions typing-inspect urllib3
uvloop wadler-lindig werkzeug wheel wrapt xarray xxhash yarl zipp""".split()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--dest", type=Path, default=REPO / ".whl", help="where the wheels go (git ignores .whl/)")
    parser.add_argument("--have", type=Path, help="the GPU machine's packages, one name a line (pip list there)")
    parser.add_argument("--check-only", action="store_true", help="check the wheels already in --dest")
    args = parser.parse_args()
    have = set(MACHINE_NAMES) | set(MACHINE)
    if args.have:
        have = {_norm(line.split()[0]) for line in args.have.read_text().splitlines() if line.strip()}
    args.dest.mkdir(parents=True, exist_ok=True)
    if not args.check_only:
        for old in args.dest.glob("*.whl"):  # a wheel of another version left here would stop the install there
            old.unlink()
        specs = [f"{name}=={PINNED.get(name) or _version(name)}" for name in WANTED]
        cmd = [sys.executable, "-m", "pip", "download", "-q", "--no-deps", "--only-binary=:all:"]
        cmd += ["--python-version", "3.12", "--implementation", "cp", "-d", str(args.dest)]
        for platform in ("manylinux_2_28_x86_64", "manylinux_2_17_x86_64", "manylinux2014_x86_64", "any"):
            cmd += ["--platform", platform]
        done = subprocess.run(cmd + specs, text=True, capture_output=True)
        if done.returncode:
            print(
                f"gpu_wheels: pip download failed: {(done.stderr.strip().splitlines() or ['?'])[-1]}", file=sys.stderr
            )
            return 1
    files = sorted(args.dest.glob("*.whl"))
    wheels = {_norm(w.name.split("-")[0]): w for w in files}
    problems, unknown = check(wheels, have)
    for name in sorted(wheels):
        versions = [w.name.split("-")[1] for w in files if _norm(w.name.split("-")[0]) == name]
        if len(versions) > 1:  # pip would refuse the whole install
            problems.append(f"{len(versions)} versions of {name} ({', '.join(versions)}): keep one")
    size = sum(w.stat().st_size for w in wheels.values()) / 2**20
    print(f"gpu_wheels: {len(wheels)} wheels, {size:.0f} MiB in {args.dest}")
    if unknown:
        print(f"gpu_wheels: version ranges on the machine's own packages, not known here: {'; '.join(unknown)}")
        print(
            "gpu_wheels: there, after the install, `PYTHONPATH=/tmp/site python3 -m pip check` says whether they hold"
        )
    for line in problems:
        print(f"gpu_wheels: {line}", file=sys.stderr)
    return 1 if problems else 0


def check(wheels: dict[str, Path], have: set[str]) -> tuple[list[str], list[str]]:
    """Every requirement of every wheel (markers for Python 3.12 on Linux, no extras) met by a fetched wheel or
    named by the machine; a fetched wheel's version must fall in the range asked for. Returns the problems, and
    the version ranges asked of the machine's packages whose versions are not known here."""
    from packaging.requirements import Requirement
    from packaging.version import Version

    env = {"python_version": "3.12", "python_full_version": "3.12.3", "sys_platform": "linux", "extra": ""}
    env |= {"platform_system": "Linux", "platform_machine": "x86_64", "implementation_name": "cpython"}
    versions = {name: Version(path.name.split("-")[1]) for name, path in wheels.items()}
    problems, unknown = [], []
    for name, path in wheels.items():
        for line in _requires(path):
            req = Requirement(line)
            if req.marker is not None and not req.marker.evaluate(env):
                continue
            dep = _norm(req.name)
            if dep in versions:
                if versions[dep] not in req.specifier:
                    problems.append(f"{name} needs {req.name}{req.specifier}, fetched {versions[dep]}")
            elif dep in MACHINE and Version(MACHINE[dep]) not in req.specifier:
                problems.append(f"{name} needs {req.name}{req.specifier}; the machine has {MACHINE[dep]}")
            elif dep not in have:
                problems.append(f"{name} needs {req.name}, which is neither fetched nor on the machine")
            elif dep not in MACHINE and req.specifier:
                unknown.append(f"{name}: {req.name}{req.specifier}")
    return problems, unknown


def _requires(wheel: Path) -> list[str]:
    with zipfile.ZipFile(wheel) as z:
        meta = next(n for n in z.namelist() if n.endswith(".dist-info/METADATA"))
        text = z.read(meta).decode()
    return [line.split(":", 1)[1].strip() for line in text.splitlines() if line.startswith("Requires-Dist:")]


def _version(name: str) -> str:
    try:
        return importlib.metadata.version(name)
    except importlib.metadata.PackageNotFoundError:
        raise SystemExit(
            f"gpu_wheels: {name} is not installed for {sys.executable}; run this with rlrm's environment "
            "(.venv/bin/python scripts/gpu_wheels.py, after bash scripts/setup.sh --dev)"
        ) from None


def _norm(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


if __name__ == "__main__":
    sys.exit(main())
