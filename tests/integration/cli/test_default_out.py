"""Commands started in the same second with their default output folder (two seeds of one profile, a report per run
in a shell loop): each gets a folder of its own. Both took one name: the second `rlrm train` was refused as "already
holds files of another run ... --resume" (the other seed's run), the second `rlrm report` deleted the first's
figures as it wrote them. The second is frozen here; the hunt that found it ran real processes started together."""

from __future__ import annotations

import time

from small_run import SMALL_RUN, as_set_args
from typer.testing import CliRunner

from rlrm.cli.common import fresh_folder, out_or_fresh
from rlrm.cli.main import app


def frozen(monkeypatch):
    second = time.strftime("%Y%m%d-%H%M%S")
    real = time.strftime
    monkeypatch.setattr(time, "strftime", lambda fmt, *args: second if fmt == "%Y%m%d-%H%M%S" else real(fmt, *args))
    return second


def test_default_folders_of_one_second_are_told_apart_and_an_unused_one_is_not_left(tmp_path, monkeypatch):
    second = frozen(monkeypatch)
    made = [fresh_folder(tmp_path / "runs", "tiny-rule") for _ in range(3)]
    assert [p.name for p in made] == [f"tiny-rule-{second}", f"tiny-rule-{second}-2", f"tiny-rule-{second}-3"]
    try:
        with out_or_fresh(None, tmp_path / "reports") as folder:
            assert folder.name == second and folder.is_dir()
            raise RuntimeError("nothing to report")
    except RuntimeError:
        pass
    assert not (tmp_path / "reports" / second).exists()  # a command that failed leaves no empty folder
    with out_or_fresh(tmp_path / "given", tmp_path / "reports") as folder:
        assert folder == tmp_path / "given" and not folder.exists()  # --out is the user's: nothing made


def test_two_trains_and_two_reports_in_one_second_each_write_their_own(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    second = frozen(monkeypatch)
    runner = CliRunner()
    args = ["train", "--profile", "tiny-rule", "--steps", "1", "--console", "none", *as_set_args(*SMALL_RUN)]
    for _ in range(2):
        result = runner.invoke(app, args)
        assert result.exit_code == 0, result.output
    runs = sorted(p.name for p in (tmp_path / "runs").iterdir())
    assert runs == [f"tiny-rule-{second}", f"tiny-rule-{second}-2"]
    for _ in range(2):
        result = runner.invoke(app, ["report", f"runs/tiny-rule-{second}"])
        assert result.exit_code == 0, result.output
    reports = sorted(p.name for p in (tmp_path / "reports").iterdir())
    assert reports == [second, f"{second}-2"]
    assert all((tmp_path / "reports" / name / "summary.md").is_file() for name in reports)
