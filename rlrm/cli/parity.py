"""`rlrm parity disrm`: the legacy in-trainer DisRM (FSDP2, bf16) against the reward loop's served
DisRM (fp32), per sample, per group and in GRPO advantages. `rlrm parity reward`: the same samples
scored through two reward contracts (a GenRM judge against another template, model, dtype or a
hosted judge; or another profile's reward), compared the same way.

    rlrm parity disrm --profile tiny-disrm --samples 16 --n 8
    rlrm parity disrm --input pairs.jsonl --model PATH --matrix
    rlrm parity disrm --model PATH --world-size 2 --legacy-dtype bf16 --out runs/parity
    rlrm parity reward --profile tiny-genrm --b-set reward.genrm.template="..." --samples 8 --n 4

Exit code 0: the verdict passed; 1: it failed; 2: an error (one line; RLRM_DEBUG=1 for the traceback).
"""

from __future__ import annotations

import functools
import os
import sys
from pathlib import Path
from typing import Annotated, Optional

import typer

from rlrm.cli.common import console, out_or_fresh
from rlrm.cli.options import DryRunOption, ProfileOption, SeedOption, SetOption
from rlrm.errors import ConfigError, RlrmError, RunFolderError, write_whole

# the verdict's ranking checks, the same for both parity commands
MinSpearmanOption = Annotated[
    Optional[float], typer.Option(help="Lowest Spearman correlation that passes (default 0.99).")
]
MaxRankFlipsOption = Annotated[
    Optional[int], typer.Option(help="Most groups whose ranking may flip (default 0).", min=0)
]
MinGroupPearsonOption = Annotated[
    Optional[float],
    typer.Option(
        help="Lowest Pearson correlation of the scores after removing each group's mean (default 0.9).",
        min=-1,
        max=1,
    ),
]

app = typer.Typer(help="Check that two reward paths give the same numbers.", no_args_is_help=True)

EXIT_PASS, EXIT_FAIL, EXIT_ERROR = 0, 1, 2


def exit_2_on_error(fn):
    """Like `friendly_errors`, but an error exits 2 (1 means a failed verdict here)."""

    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        try:
            return fn(*args, **kwargs)
        except (typer.Exit, KeyboardInterrupt):
            raise
        except Exception as exc:
            if os.environ.get("RLRM_DEBUG"):
                raise
            text = (str(exc).strip().splitlines() or [""])[0]
            shown = (
                text
                if isinstance(exc, RlrmError)
                else f"unexpected {type(exc).__name__}: {text} (RLRM_DEBUG=1 shows the traceback)"
            )
            print(f"error: {shown}", file=sys.stderr)
            raise typer.Exit(EXIT_ERROR) from None

    return wrapper


@app.command("disrm", short_help="Legacy FSDP2 DisRM against the reward loop's: scores, rankings, advantages.")
@exit_2_on_error
def disrm(
    profile: ProfileOption = None,
    overrides: SetOption = [],
    model: Annotated[
        Optional[str], typer.Option(help="Reward model (folder, hub id or tiny:NAME) instead of the profile's.")
    ] = None,
    input: Annotated[
        Optional[Path],
        typer.Option("--input", help=".jsonl/.parquet of prompt, response, group_id (instead of generating)."),
    ] = None,
    samples: Annotated[
        int, typer.Option(help="Prompts to generate for (the first of the profile's train split).", min=1)
    ] = 16,
    n: Annotated[
        Optional[int], typer.Option("--n", help="Responses per prompt (default: the profile's rollout.n).", min=1)
    ] = None,
    seed: SeedOption = 0,
    legacy_dtype: Annotated[str, typer.Option(help="Legacy FSDP2 compute dtype: bf16, fp16 or fp32.")] = "bf16",
    loop_dtype: Annotated[str, typer.Option(help="Served DisRM dtype: fp32 or bf16.")] = "fp32",
    matrix: Annotated[
        bool, typer.Option("--matrix", metavar="", help="Every legacy dtype against every loop dtype; prints the grid.")
    ] = False,
    world_size: Annotated[int, typer.Option(help="Legacy ranks (processes; gloo on CPU, nccl on GPU).", min=1)] = 1,
    micro_batch_size: Annotated[int, typer.Option(help="Legacy samples per forward.", min=1)] = 8,
    max_tokens_per_batch: Annotated[
        Optional[int], typer.Option(help="Legacy token budget per forward (dynamic batch size).", min=1)
    ] = None,
    rmpad: Annotated[bool, typer.Option("--rmpad/--no-rmpad", metavar="", help="Legacy padding-free forward.")] = False,
    max_length: Annotated[
        Optional[int],
        typer.Option(
            help="Longest conversation in tokens (default: reward.disrm.max_length, capped by the model).", min=1
        ),
    ] = None,
    truncation: Annotated[
        str,
        typer.Option(
            "--legacy-truncation",
            help="keep-end: as the reward loop; keep-start: as verl's legacy worker (truncation: right).",
        ),
    ] = "keep-end",
    template: Annotated[
        Optional[Path], typer.Option(help="Chat template file for a reward tokenizer that has none (both paths).")
    ] = None,
    addresses: Annotated[
        list[str], typer.Option("--address", help="Score the loop side with this running server (repeatable).")
    ] = [],
    device: Annotated[str, typer.Option(help="Legacy ranks' device: auto, cpu or cuda.")] = "auto",
    threads: Annotated[int, typer.Option(help="torch threads per legacy rank (0: cores / world size).", min=0)] = 0,
    atol: Annotated[
        Optional[float],
        typer.Option(
            help="Absolute score tolerance (default 2^-5); a sample passes within atol + rtol * max(|loop|, RMS).",
            min=0,
        ),
    ] = None,
    rtol: Annotated[
        Optional[float],
        typer.Option(
            help="Relative score tolerance, of max(|loop score|, RMS of the loop scores) (default 2^-3).", min=0
        ),
    ] = None,
    max_outside_frac: Annotated[
        Optional[float],
        typer.Option(help="Share of samples allowed outside the band (default 0.01; NaN never).", min=0, max=1),
    ] = None,
    min_spearman: MinSpearmanOption = None,
    max_rank_flips: MaxRankFlipsOption = None,
    min_group_pearson: MinGroupPearsonOption = None,
    out: Annotated[
        Optional[Path],
        typer.Option("--out", help="Output folder (default: runs/parity-disrm-<time>, -2 after it if taken)."),
    ] = None,
    dry_run: DryRunOption = False,
    score_offset: Annotated[
        int, typer.Option(hidden=True, min=0, help="Debug: legacy scores this many tokens before the last.")
    ] = 0,
    invariance: Annotated[
        bool,
        typer.Option(
            "--invariance/--no-invariance",
            metavar="",
            help="Also check that served scores do not depend on batch size or padding side (fails the verdict).",
        ),
    ] = True,
    train_steps: Annotated[
        Optional[int],
        typer.Option(
            help="Also train N steps twice (legacy vs loop scorer, same seed) and compare the reward curves.", min=1
        ),
    ] = None,
) -> None:
    """Score the same samples with the legacy FSDP2 DisRM worker and the reward loop; compare scores,
    group rankings and GRPO advantages against tolerances. The profile (default tiny-disrm) names the
    policy, dataset and reward model; --seed seeds the generation; scores.parquet and summary.json go to
    --out (default runs/parity-disrm-<time>)."""
    import json

    from rlrm.parity.options import ParityOptions, build_config, build_samples, load_parity_profile

    opts = ParityOptions.of(locals())  # the options above, by their parameter names
    resolved = load_parity_profile(opts)
    cfg = build_config(opts, resolved)
    if dry_run:
        source = (
            str(input)
            if input is not None
            else f"{samples} prompts x {n or resolved.rollout.n} of {resolved.model.path}"
        )
        typer.echo(json.dumps({"samples": source, **cfg.model_dump(mode="json", exclude={"reward"})}, indent=2))
        return
    if train_steps is not None and profile is None:
        raise ConfigError("--train-steps trains a profile's policy: pass --profile (e.g. tiny-disrm)")
    if train_steps is not None and (matrix or addresses):
        raise ConfigError(
            "--train-steps trains with one pair of dtypes and rlrm's own servers; drop --matrix/--address"
        )
    with out_or_fresh(out, Path("runs"), "parity-disrm") as out:
        _check_out(out)
        code = _run(cfg, build_samples(opts, resolved), out)
        if train_steps is not None:
            _train(resolved, cfg, train_steps, out)
    raise typer.Exit(code)


def _train(profile, cfg, steps: int, out: Path) -> None:
    """Training-curve parity into out/train/{legacy,loop}; merged into summary.json as `train`."""
    import json

    from rlrm.parity.train_curves import train_parity

    term = console()
    term.print(
        f"[dim]training {steps} steps twice: legacy {cfg.legacy_dtypes[0]} vs reward loop {cfg.loop_dtypes[0]}[/dim]"
    )
    curves = train_parity(
        profile,
        cfg.model,
        steps,
        cfg.legacy_dtypes[0],
        cfg.loop_dtypes[0],
        cfg.world_size,
        cfg.max_length,
        out / "train",
        cfg.device,
    )
    path = out / "summary.json"
    summary = json.loads(path.read_text())
    summary["train"] = curves
    text = json.dumps(summary, indent=2)
    write_whole(path, lambda tmp: tmp.write_text(text))
    term.print(
        f"reward curves over {len(curves['steps'])} steps: mean |legacy - loop| {curves['mean_abs_diff']:.4g}, "
        f"max {curves['max_abs_diff']:.4g}, trend {curves['abs_diff_slope_per_step']:+.2e} per step; "
        f"runs in {out / 'train'}"
    )


def _check_out(out: Path) -> None:
    """RunFolderError, before anything is scored, for an --out that is a file or holds anything (an earlier result
    would be mixed with this one's, or lost), as `rlrm bench` does."""
    if out.exists() and not out.is_dir():
        raise RunFolderError(f"--out {out} is a file; give a folder")
    if out.is_dir() and any(out.iterdir()):
        raise RunFolderError(f"--out {out} is not empty; choose another --out or remove it")


def _run(cfg, samples, out: Path) -> int:
    from rlrm.launch.common import progress
    from rlrm.parity.report import matrix_table, summary_table, write_cell, write_matrix
    from rlrm.parity.run import run_parity

    term = console()
    progress.enable(True)  # a server that does not answer yet says so while its start_timeout_s runs
    try:
        cells = run_parity(cfg, samples, log=lambda line: term.print(f"[dim]{line}[/dim]"))
    finally:
        progress.enable(False)
    if len(cells) == 1:
        write_cell(out, samples, cells[0])
        term.print(summary_table(cells[0]))
    else:
        write_matrix(out, samples, cells)
        term.print(matrix_table(cells))
    failed = [c for c in cells if not c.passed]
    written = "scores.parquet and summary.json" if len(cells) == 1 else "matrix.json and a folder per dtype pair"
    term.print(f"{'FAIL' if failed else 'PASS'}: {written} in {out}")
    return EXIT_FAIL if failed else EXIT_PASS


@app.command("reward", short_help="Two reward contracts on the same samples: what differs, and by how much.")
@exit_2_on_error
def reward(
    profile: ProfileOption = None,
    overrides: SetOption = [],
    b_profile: Annotated[
        Optional[str],
        typer.Option("--b-profile", help="Side B scores with this profile's reward (default: --profile's)."),
    ] = None,
    b_sets: Annotated[
        list[str],
        typer.Option(
            "--b-set",
            help="Change side B's reward only, e.g. --b-set reward.genrm.template=... or reward.server.addresses=URL "
            "(repeatable; reward.* keys).",
        ),
    ] = [],
    input: Annotated[
        Optional[Path],
        typer.Option(
            "--input", help=".jsonl/.parquet of prompt, response, group_id[, reference] (instead of generating)."
        ),
    ] = None,
    samples: Annotated[
        int, typer.Option(help="Prompts to generate for (the first of the profile's train split).", min=1)
    ] = 8,
    n: Annotated[
        Optional[int], typer.Option("--n", help="Responses per prompt (default: the profile's rollout.n).", min=1)
    ] = None,
    seed: SeedOption = 0,
    atol: Annotated[
        Optional[float],
        typer.Option(
            help="Absolute score tolerance (default 2^-5); B passes within atol + rtol * max(|A|, RMS).", min=0
        ),
    ] = None,
    rtol: Annotated[
        Optional[float], typer.Option(help="Relative score tolerance, of max(|A|, RMS of A) (default 2^-3).", min=0)
    ] = None,
    max_outside_frac: Annotated[
        Optional[float],
        typer.Option(help="Share of samples allowed outside the band (default 0.01).", min=0, max=1),
    ] = None,
    min_spearman: MinSpearmanOption = None,
    max_rank_flips: MaxRankFlipsOption = None,
    min_group_pearson: MinGroupPearsonOption = None,
    max_failed_frac: Annotated[
        float,
        typer.Option(
            help="Share of samples each side may fail to score (left out, counted; default none).", min=0, max=1
        ),
    ] = 0.0,
    out: Annotated[
        Optional[Path],
        typer.Option("--out", help="Output folder (default: runs/parity-reward-<time>, -2 after it if taken)."),
    ] = None,
    dry_run: DryRunOption = False,
) -> None:
    """Score the same samples through two reward contracts, side A (the profile's reward) and side B (with
    --b-set, or --b-profile's reward), and compare them as `parity disrm` does: both contract fingerprints and
    what differs, verdict agreement (Cohen's kappa for yes/no judges), score differences, group rank flips, GRPO
    advantages, failures and judge calls per side. The profile defaults to tiny-genrm; scores.parquet and
    summary.json go to --out."""
    import json

    from rlrm.parity.contract_diff import setting_changes
    from rlrm.parity.reward_options import RewardParityOptions, build_reward_samples, load_sides

    opts = RewardParityOptions.of(locals())  # the options above, by their parameter names
    opts.tolerances()  # a tolerance no verdict can use (NaN, inf, a correlation beyond 1) is refused at once
    resolved, a, b = load_sides(opts)
    if dry_run:
        source = (
            str(input)
            if input is not None
            else f"{samples} prompts x {n or resolved.rollout.n} of {resolved.model.path}"
        )
        sides = {side.name: {"origin": side.origin, "reward": side.reward.model_dump(mode="json")} for side in (a, b)}
        differs = setting_changes(a.reward, b.reward)
        typer.echo(json.dumps({"samples": source, "settings_that_differ": differs, "sides": sides}, indent=2))
        return
    with out_or_fresh(out, Path("runs"), "parity-reward") as out:
        _check_out(out)
        code = _run_reward(opts, resolved, a, b, build_reward_samples(opts, resolved), out)
    raise typer.Exit(code)


def _run_reward(opts, profile, a, b, samples, out: Path) -> int:
    from rlrm.parity.reward_report import reward_table, write_reward_parity
    from rlrm.parity.reward_run import run_reward_parity

    term = console()
    result = run_reward_parity(
        a,
        b,
        samples,
        opts.tolerances(),
        profile.algorithm.adv_eps,
        profile.algorithm.norm_adv_by_std,
        opts.max_failed_frac,
        log=lambda line: term.print(f"[dim]{line}[/dim]"),
    )
    write_reward_parity(out, samples, result)
    term.print(reward_table(result))
    term.print(f"{'PASS' if result.passed else 'FAIL'}: scores.parquet and summary.json in {out}")
    return EXIT_PASS if result.passed else EXIT_FAIL
