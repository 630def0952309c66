"""What `rlrm bench simulate` was asked to do, resolved before anything runs.

    plan = make_plan(from_=Path("runs/tiny"), spec_file=None, overrides=["rollout.replicas=8"], sweep=None)
    plan.spec, plan.calibration, plan.sweep, plan.bench

`--from` a benchmark folder (results.csv + runs/) means validation against it; `--from` a run
folder means calibration on it, with `--spec` and `--set` applied on top of the fit.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from rlrm.bench.simulate.calibrate import Calibration, calibrate
from rlrm.bench.simulate.check_vs_bench import is_bench_folder
from rlrm.bench.simulate.spec import SimSpec, load_spec, parse_sweep
from rlrm.errors import ConfigError, RunFolderError


@dataclass
class Plan:
    spec: SimSpec | None
    calibration: Calibration | None = None
    sweep: tuple[str, list[str]] | None = None
    bench: Path | None = None  # validate against this benchmark folder


def make_plan(from_: Path | None, spec_file: Path | None, overrides: list[str], sweep: str | None) -> Plan:
    """Check every input and resolve the spec (calibrating when asked); raise one clear error otherwise."""
    if from_ is not None and not Path(from_).exists():
        raise RunFolderError(
            f"--from {from_} does not exist; give a run folder (rlrm train) or a benchmark folder (rlrm bench reward-latency)"
        )
    if from_ is not None and is_bench_folder(from_):
        if spec_file is not None or sweep is not None:
            raise ConfigError(
                "--from a benchmark folder validates against it; drop --spec and --sweep (or give --from a run folder)"
            )
        return Plan(spec=None, bench=Path(from_))
    if from_ is None and spec_file is None:
        raise ConfigError(
            "give --from RUN_DIR (calibrate on a run), --from BENCH_DIR (validate) or --spec FILE (a cluster spec)"
        )
    calibration = calibrate([Path(from_)]) if from_ is not None else None
    base = calibration.spec_values if calibration is not None else None
    spec = load_spec(spec_file, overrides, base=base)
    points = parse_sweep(sweep) if sweep else None
    for item in points[1] if points else []:  # every point must be a valid spec before anything runs
        try:
            load_spec(overrides=[item], base=spec.model_dump(mode="json"))
        except ConfigError as exc:
            raise ConfigError(
                f"--sweep point {item}: {str(exc).removeprefix('spec: ').removeprefix('--set ')}"
            ) from None
    return Plan(spec=spec, calibration=calibration, sweep=points)
