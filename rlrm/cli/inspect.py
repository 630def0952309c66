"""`rlrm inspect reward`: what the reward actually receives and returns, per sample, with lints.

    rlrm inspect reward --profile tiny-genrm --n 4
    rlrm inspect reward --profile tiny-disrm --input samples.jsonl --json
    rlrm inspect reward --profile tiny-disrm --prompt "What is 2 + 3?" --response "2 + 3 = 5\\n#### 5" --strict
    rlrm inspect reward --profile tiny-disrm --n 64 --invariance

Exit code 0: done (lints are warnings); 1: --strict and a warning lint fired, or --invariance failed;
2: an error (one line; RLRM_DEBUG=1 for the traceback).
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Optional

import typer

from rlrm.cli.common import console
from rlrm.cli.options import ProfileOption, SeedOption, SetOption, given
from rlrm.cli.parity import exit_2_on_error
from rlrm.errors import ConfigError

MAX_SAMPLES = 4096  # inspect prints every sample: more is a job for `rlrm eval rm`

app = typer.Typer(help="Show what a reward setup sees before training on it.", no_args_is_help=True)


@app.command("reward", short_help="Show, per sample, what the reward received and returned.")
@exit_2_on_error
def reward(
    profile: ProfileOption = None,
    overrides: SetOption = [],
    input: Annotated[
        Optional[Path], typer.Option("--input", help=".jsonl of prompt, response (optional ground_truth, group_id).")
    ] = None,
    prompt: Annotated[
        Optional[str], typer.Option("--prompt", help="One prompt (a user turn); needs --response.")
    ] = None,
    response: Annotated[Optional[str], typer.Option("--response", help="The response to score with --prompt.")] = None,
    ground_truth: Annotated[
        Optional[str],
        typer.Option("--ground-truth", help="Reference answer for --prompt (rule, judges with {reference})."),
    ] = None,
    n: Annotated[
        int, typer.Option("--n", help="Samples: the first K of --input, or K policy responses to test prompts.", min=1)
    ] = 8,
    seed: SeedOption = 0,
    as_json: Annotated[bool, typer.Option("--json", metavar="", help="Print JSON instead of tables.")] = False,
    strict: Annotated[bool, typer.Option("--strict", metavar="", help="Exit 1 when a warning lint fires.")] = False,
    invariance: Annotated[
        bool,
        typer.Option(
            "--invariance",
            metavar="",
            help="DisRM: also score the samples one at a time, in batches of 8 and of the server's max, right- and left-padded, and compare.",
        ),
    ] = False,
) -> None:
    """Score K samples through the profile's reward loop and servers (started and stopped as in
    training) and show, per sample, what the reward received and returned: for a DisRM the rendered
    conversation with its special tokens, token count, truncation, the scored token and the raw float32
    score; for a GenRM the judge prompt as sent, the raw verdict and its parse, token usage; for the rule
    the extracted answer. Without --input or --prompt the samples are the profile's policy's responses to
    the first K prompts of its test split. Lints are printed after (see docs/validating-rewards.md). The profile defaults
    to tiny-disrm."""
    from rlrm.config.loader import load_profile
    from rlrm.reward_checks import samples as sample_source
    from rlrm.reward_checks.inspect import inspect_reward
    from rlrm.reward_checks.show import print_report, to_json

    if input is not None and (prompt is not None or response is not None):
        raise ConfigError("give either --input FILE or --prompt/--response, not both")
    if (prompt is None) != (response is None):
        raise ConfigError("--prompt and --response go together: give both")
    if ground_truth is not None and prompt is None:
        raise ConfigError("--ground-truth goes with --prompt; rows of --input carry their own ground_truth")
    resolved = load_profile(profile or "tiny-disrm", overrides)
    settings = None
    if invariance:
        if resolved.reward.model_kind != "disrm":
            raise ConfigError(
                f"--invariance checks a DisRM's scores; reward.kind={resolved.reward.kind} serves no DisRM"
            )
        from rlrm.engine.rewards.invariance import InvarianceSettings

        settings = InvarianceSettings(max_batch=resolved.reward.server.max_batch, dtype=resolved.reward.server.dtype)
    if n > MAX_SAMPLES:
        raise ConfigError(
            f"--n {n}: inspect scores at most {MAX_SAMPLES} samples (it shows each one); score more with `rlrm eval rm`"
        )
    if input is not None:
        batch = sample_source.read_inspect_file(input)[:n]
    elif prompt is not None and response is not None:  # given together (checked above)
        batch = [sample_source.one_sample(prompt, response, ground_truth)]
    else:
        batch = sample_source.policy_samples(resolved, n, given(seed, "--seed"))
    if prompt is None and len(batch) < n:
        where = str(input) if input is not None else "the profile's test split"
        typer.echo(f"note: --n {n} asked, {where} holds {len(batch)}: scoring {len(batch)}", err=True)
    report = inspect_reward(resolved, batch, settings)
    if as_json:
        typer.echo(to_json(report))
    else:
        print_report(report, console())
    failed = (strict and report.warnings) or (report.invariance is not None and not report.invariance["passed"])
    raise typer.Exit(1 if failed else 0)
