"""The docs stay true: links resolve, shown commands parse, names exist, the key reference matches the schema.

    PYTHONPATH=$PWD .venv/bin/python -m pytest -q tests/docs/test_docs.py

Every relative link in README.md and docs/*.md must name a file that exists (and a heading of it, for `#anchor`);
every `rlrm ...` command in a fenced code block must parse: `rlrm train` runs in-process with `--dry-run` (the
profile resolves, every `--set` key exists), the others with `--help` (the command exists, every option name is
one it takes); every option in a CLI table exists; every repository path and `rlrm.<module>` name exists; yaml
examples validate as profiles; docs/configuration.md holds what `python -m rlrm.config.reference` renders now;
.ci/run ends with the README's test command."""

from __future__ import annotations

import itertools
import re
import shlex
import shutil
from pathlib import Path

import pytest
from typer.testing import CliRunner

from rlrm.cli import reference as cli_reference
from rlrm.cli.main import app
from rlrm.config import reference

ROOT = Path(__file__).resolve().parents[2]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
FENCE = re.compile(r"^\s*```(\S*)\s*$")
LINK = re.compile(r"!?\[[^\]]*\]\(([^)\s]+)\)")
SHELL_LANGS = {"", "bash", "sh", "shell", "console"}
SHELL_SPLIT = {"&&", "||", ";", "|", ">", ">>", "<", "2>", "&"}


def _prose_and_blocks(text: str) -> tuple[list[str], list[tuple[str, list[str]]]]:
    """The lines outside fenced code blocks, and each block as (language, lines)."""
    prose, blocks, block = [], [], None
    for line in text.splitlines():
        fence = FENCE.match(line)
        if fence and block is None:
            block = (fence.group(1).lower(), [])
        elif fence and block is not None:
            blocks.append(block)
            block = None
        elif block is not None:
            block[1].append(line)
        else:
            prose.append(line)
    assert block is None, "a fenced code block is never closed"
    return prose, blocks


def github_anchors(text: str) -> set[str]:
    """The `#anchor` GitHub gives each heading: lower case, punctuation dropped, spaces as hyphens, -1 for repeats."""
    anchors, seen = set(), {}
    for line in _prose_and_blocks(text)[0]:
        match = re.match(r"^#{1,6}\s+(.*?)\s*#*\s*$", line)
        if not match:
            continue
        slug = re.sub(r"[^\w\- ]", "", match.group(1).lower()).replace(" ", "-")
        count = seen.get(slug, 0)
        seen[slug] = count + 1
        anchors.add(slug if count == 0 else f"{slug}-{count}")
    return anchors


def relative_links(page: Path) -> list[str]:
    prose = "\n".join(_prose_and_blocks(page.read_text(encoding="utf-8"))[0])
    prose = re.sub(r"`[^`\n]*`", "", prose)  # a link shown as code is not a link
    return [t for t in LINK.findall(prose) if not re.match(r"^[a-z][a-z0-9+.-]*:", t)]


def shown_commands_in_dirs() -> list[tuple[str, list[str], str]]:
    """(page name, argv after `rlrm`, folder) for every rlrm command in a fenced shell block of the pages; the folder
    is the repository-relative one a `cd DIR` earlier in the block moved to ("" when none)."""
    found = []
    for page in PAGES:
        for lang, lines in _prose_and_blocks(page.read_text(encoding="utf-8"))[1]:
            if lang not in SHELL_LANGS:
                continue
            folder = ""
            for line in "\n".join(lines).replace("\\\n", " ").splitlines():
                moved = re.match(r"^\s*cd\s+([\w./-]+)\s*(#.*)?$", line)
                if moved:
                    folder = moved.group(1)
                    continue
                if not re.search(r"(^|&&|;)\s*(\w+=\S*\s+)*(\S*/)?rlrm\s", line):
                    continue  # output, file listings, other tools
                words = shlex.split(line, comments=True)
                while words:
                    cut = next((i for i, w in enumerate(words) if w in SHELL_SPLIT), len(words))
                    command, words = words[:cut], words[cut + 1 :]
                    while command and re.match(r"^\w+=", command[0]):
                        command = command[1:]  # VAR=value before the command
                    if command and Path(command[0]).name == "rlrm":
                        found.append((page.name, command[1:], folder))
    return found


def shown_commands() -> list[tuple[str, list[str]]]:
    """(page name, argv after `rlrm`) for every rlrm command in a fenced shell block of the pages."""
    return [(page, argv) for page, argv, _ in shown_commands_in_dirs()]


def test_pages_exist_and_readme_is_a_front_door():
    names = {p.name for p in PAGES}
    for page in ("getting-started.md", "configuration.md", "reward-loop.md", "security.md", "rollout-servers.md"):
        assert page in names
    for page in ("scheduling.md", "scaling-out.md", "validating-rewards.md", "metrics.md", "benchmarks.md"):
        assert page in names
    assert "development.md" in names
    assert len((ROOT / "README.md").read_text(encoding="utf-8").splitlines()) <= 250


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.name)
def test_relative_links_resolve(page):
    broken = []
    for target in relative_links(page):
        path, _, anchor = target.partition("#")
        file = (page.parent / path).resolve() if path else page
        if not file.exists():
            broken.append(f"{target}: no such file")
        elif anchor and file.suffix == ".md" and anchor not in github_anchors(file.read_text(encoding="utf-8")):
            broken.append(f"{target}: no heading with anchor #{anchor} in {file.name}")
    assert not broken, f"{page.name}: " + "; ".join(broken)


def test_commands_are_found():
    commands = shown_commands()
    assert len(commands) >= 20, commands
    assert ("README.md", ["train", "--profile", "tiny-genrm"]) in commands


@pytest.mark.parametrize(
    "where, argv, folder", shown_commands_in_dirs(), ids=lambda v: " ".join(v) if isinstance(v, list) else v
)
def test_shown_command_parses(where, argv, folder, tmp_path, monkeypatch):
    if folder:  # the command runs in a folder of the repository (`cd examples/...`): in a copy of it
        assert (ROOT / folder).is_dir(), f"{where}: cd {folder}: no such folder in the repository"
        shutil.copytree(ROOT / folder, tmp_path, dirs_exist_ok=True)
    before = sorted(p.relative_to(tmp_path) for p in tmp_path.rglob("*"))
    monkeypatch.chdir(tmp_path)  # a dry run writes nothing; should one write, it writes here
    # whether it parses, not whether this machine holds the command's files and GPUs (a dry run checks those last)
    monkeypatch.setattr("rlrm.engine.run_checks.check_inputs", lambda profile: None)
    if argv[0] == "train" and "--resume" not in argv:
        args = argv if "--dry-run" in argv else [*argv, "--dry-run"]
    else:
        args = [*argv, "--help"]
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 0, f"{where}: rlrm {' '.join(args)}\n{result.output}"
    after = sorted(p.relative_to(tmp_path) for p in tmp_path.rglob("*"))
    assert after == before, f"{where}: rlrm {' '.join(args)} wrote {sorted(set(after) - set(before))}"


def test_configuration_page_is_generated_from_the_schema():
    page = (ROOT / "docs" / "configuration.md").read_text(encoding="utf-8")
    assert reference.splice(page, reference.render()) == page, (
        "docs/configuration.md is stale: run python -m rlrm.config.reference --write docs/configuration.md"
    )


def test_profile_table_is_generated_from_the_profiles():
    page = (ROOT / "docs" / "configuration.md").read_text(encoding="utf-8")
    fresh = reference.splice(page, reference.render_profiles(), reference.PROFILES_BEGIN, reference.PROFILES_END)
    assert fresh == page, (
        "docs/configuration.md's profile table is stale: run python -m rlrm.config.reference --write docs/configuration.md"
    )
    for name in reference.list_profiles():
        assert f"| `{name}` |" in page, f"profile {name} is not in docs/configuration.md"


def test_commands_page_is_generated_from_the_cli():
    """An option or command added without `python -m rlrm.cli.reference --write docs/commands.md` fails here."""
    page = (ROOT / "docs" / "commands.md").read_text(encoding="utf-8")
    assert cli_reference.splice(page, cli_reference.render(), cli_reference.BEGIN, cli_reference.END) == page, (
        "docs/commands.md is stale: run python -m rlrm.cli.reference --write docs/commands.md"
    )
    for path, command in cli_reference.commands():
        assert f"### {path}\n" in page
        for param in command.params:
            for option in param.opts if param.param_type_name == "option" and not param.hidden else ():
                assert f"`{option}`" in page.split(f"### {path}\n")[1].split("\n### ")[0], f"{path} {option}"


def test_commands_reference_shows_flags_without_a_type_and_bounds_with_it():
    text = cli_reference.render()
    train = text.split("### rlrm train\n")[1].split("\n### ")[0]
    assert "| `--dry-run` | flag |" in train and "| `--steps` | int >= 1 |" in train
    assert "Output folder (default: runs/<profile>-<time>, -2 after it if taken)." in train


def test_every_schema_key_is_in_the_reference():
    from rlrm.config.schema import Profile

    text = reference.render()
    for section, model, leaves in reference._sections(Profile, ""):
        for name, field in leaves:
            key = f"{section}.{name}" if section else name
            assert f"| `{key}` |" in text and field.description, key


def test_ci_runs_the_readme_test_command():
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    block = next(lines for lang, lines in _prose_and_blocks(readme)[1] if lang in SHELL_LANGS)
    test_command = next(line.strip() for line in block if line.strip().startswith("bash scripts/setup.sh --dev"))
    ci = [line.strip() for line in (ROOT / ".ci" / "run").read_text().splitlines()]
    assert [line for line in ci if line and not line.startswith("#")][-1] == test_command


def table_commands() -> list[tuple[str, list[str], list[str]]]:
    """(page name, command path, option names) for each `rlrm ...` in the first cell of a Markdown table row."""
    found = []
    for page in PAGES:
        for line in _prose_and_blocks(page.read_text(encoding="utf-8"))[0]:
            for cell in re.findall(r"^\|\s*`(rlrm [^`]*)`", line):
                words = cell.replace("\\|", "|").split()[1:]
                path = list(itertools.takewhile(lambda w: re.match(r"^[a-z][a-z-]*$", w), words))
                found.append((page.name, path, sorted(set(re.findall(r"(--[a-z][a-z-]*)", cell)))))
    return found


@pytest.mark.parametrize(
    "where, path, options", table_commands(), ids=lambda v: " ".join(v) if isinstance(v, list) else v
)
def test_table_command_options_exist(where, path, options):
    result = CliRunner().invoke(app, [*path, "--help"], terminal_width=200)
    assert result.exit_code == 0, f"{where}: rlrm {' '.join(path)} --help\n{result.output}"
    missing = [o for o in options if not re.search(rf"{o}(?![a-z-])", result.output)]
    assert not missing, f"{where}: rlrm {' '.join(path)} has no option {', '.join(missing)}"


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.name)
def test_named_repository_paths_exist(page):
    """A path such as `rlrm/launch/fleet/pool.py` or `tests/unit/engine/` named in a page exists (renames update the docs)."""
    text = page.read_text(encoding="utf-8")
    named = re.findall(r"(?<![\w./~-])((?:rlrm|tests|benchmarks|examples|scripts|profiles|docs)/[\w./-]*)", text)
    missing = sorted({p for p in named if not (ROOT / p.rstrip(".")).exists()})
    assert not missing, f"{page.name} names paths that do not exist: {', '.join(missing)}"


def test_reference_write_regenerates_between_the_markers_only(tmp_path):
    page = tmp_path / "page.md"
    page.write_text(f"# intro kept\n{reference.BEGIN}\nOLD TEXT\n{reference.END}\ntail kept\n", encoding="utf-8")
    assert reference.main(["--write", str(page)]) == 0
    text = page.read_text(encoding="utf-8")
    assert text.startswith("# intro kept\n") and text.endswith(f"{reference.END}\ntail kept\n")
    assert "OLD TEXT" not in text and "| `actor.world_size` |" in text


def test_reference_write_without_markers_is_one_line_error(tmp_path, capsys):
    page = tmp_path / "page.md"
    page.write_text("no markers\n", encoding="utf-8")
    assert reference.main(["--write", str(page)]) == 1
    assert reference.main(["--write", str(tmp_path / "missing.md")]) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 2 and all(line.startswith("error: ") for line in err)
    assert page.read_text(encoding="utf-8") == "no markers\n"


def test_named_modules_and_objects_exist():
    """`rlrm.x.y` or `rlrm.x.y.Name` in a page names a module, or an object of one, that exists."""

    names = set()
    for page in PAGES:
        names |= set(re.findall(r"\brlrm(?:\.\w+)+", page.read_text(encoding="utf-8")))
    assert "rlrm.launch.server" in names
    missing = []
    for name in sorted(names):
        parts = name.split(".")
        spec = next((i for i in range(len(parts), 0, -1) if _find_spec(".".join(parts[:i]))), 0)
        if spec < len(parts) - 1 or (spec == len(parts) - 1 and parts[-1] not in _module_names(".".join(parts[:spec]))):
            missing.append(name)
    assert not missing, f"no such module or object: {', '.join(missing)}"


def _find_spec(module: str):
    import importlib.util

    try:
        return importlib.util.find_spec(module)
    except ModuleNotFoundError:  # a parent is a module, not a package
        return None


def _module_names(module: str) -> set[str]:
    """The top-level names a module defines, read from its source (nothing imported)."""
    import ast
    import importlib.util

    tree = ast.parse(Path(importlib.util.find_spec(module).origin).read_text(encoding="utf-8"))
    names = set()
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(node.name)
        elif isinstance(node, (ast.Assign, ast.AnnAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            names |= {t.id for t in targets if isinstance(t, ast.Name)}
        elif isinstance(node, ast.ImportFrom):
            names |= {a.asname or a.name for a in node.names}
    return names


def test_yaml_examples_are_valid_profiles():
    """Each ```yaml block of the pages validates against the schema (a renamed or removed key fails here)."""
    import yaml

    from rlrm.config.loader import parse_profile

    blocks = [
        (p.name, lines) for p in PAGES for lang, lines in _prose_and_blocks(p.read_text("utf-8"))[1] if lang == "yaml"
    ]
    assert blocks, "no yaml example found"
    from rlrm.config.loader import load_profile

    for name, lines in blocks:
        named = re.match(r"^# ((?:examples|profiles)/\S+\.ya?ml)$", lines[0]) if lines else None
        if named:  # the page shows a file of the repository: the file is a valid profile, and holds what is shown
            load_profile(str(ROOT / named.group(1)))
            text = (ROOT / named.group(1)).read_text(encoding="utf-8")
            missing = [line for line in lines[1:] if line.strip() and line not in text]
            assert not missing, f"{name} shows lines that {named.group(1)} does not hold: {missing}"
            continue
        raw = yaml.safe_load("\n".join(lines))
        raw.pop("extends", None)  # the keys the example sets are checked; what it extends is a profile of its own
        parse_profile(raw, source=f"the yaml example in {name}")


def test_reward_function_examples_take_verls_arguments():
    """Each ```python block that defines a `compute_score` compiles, and rlrm's start-up check accepts its signature:
    a page that shows another signature (one `sample` argument, say) shows a function every run would refuse."""
    from rlrm.config.reward import RewardConfig
    from rlrm.engine.rewards.custom import check_signature

    path = str(ROOT / "examples" / "your-model" / "my_reward.py")  # any existing file: only the message names it
    cfg = RewardConfig(kind="custom", custom={"path": path, "name": "compute_score"})
    shown = [
        (p.name, "\n".join(lines))
        for p in PAGES
        for lang, lines in _prose_and_blocks(p.read_text("utf-8"))[1]
        if lang == "python" and re.search(r"^(async )?def compute_score\(", "\n".join(lines), re.M)
    ]
    assert len(shown) >= 3, shown  # reward-loop.md, agentic.md, your-model.md
    for name, code in shown:
        scope: dict = {}
        exec(compile(code, f"<the compute_score example in {name}>", "exec"), scope)  # the docs' own code
        check_signature(scope["compute_score"], cfg, {})
