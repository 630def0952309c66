"""Import a Python file a user names in a profile (a custom reward, a tool): one ConfigError line when it cannot be.
A helper module beside it imports while it runs (`_beside`).

    module = import_file("rewards/mine.py", "rlrm_custom_reward_mine", "reward.custom.path rewards/mine.py")

The file runs as it is imported: name only files you trust (docs/security.md).
"""

from __future__ import annotations

import contextlib
import importlib.util
import inspect
import os
import sys
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType

from rlrm.errors import ConfigError


def import_file(path: str | Path, module_name: str, label: str) -> ModuleType:
    """The module the file at `path` defines; `label` starts each error line (the setting and the file)."""
    spec = importlib.util.spec_from_file_location(module_name, Path(path))
    if spec is None or spec.loader is None:
        raise ConfigError(f"{label} cannot be imported as a Python module")
    module = importlib.util.module_from_spec(spec)
    # registered before it runs, as `import` does: dataclasses under `from __future__ import annotations` look their
    # module up there, and pickle (worker processes) finds the file's functions by it
    sys.modules[module_name] = module
    try:
        with _beside(Path(path)):
            spec.loader.exec_module(module)
    except Exception as exc:
        sys.modules.pop(module_name, None)
        raise ConfigError(f"{label} failed to import: {type(exc).__name__}: {exc}") from None
    return module


@contextlib.contextmanager
def _beside(path: Path) -> Iterator[None]:
    """While the file runs: its folder on sys.path (after installed packages, which it cannot shadow), so a helper
    module beside it imports as `python file.py` finds it. Afterwards the folder is off the path and the helpers it
    loaded are out of sys.modules (the file keeps them), so another file's helper of the same name is its own."""
    folder = str(path.resolve().parent)
    added = folder not in sys.path
    if added:
        sys.path.append(folder)
    before = set(sys.modules)
    try:
        yield
    finally:
        if added:
            sys.path.remove(folder)
            for name in set(sys.modules) - before:
                origin = getattr(sys.modules[name], "__file__", None) or ""
                if origin and str(Path(origin).resolve()).startswith(folder + os.sep):
                    del sys.modules[name]


def is_async(fn) -> bool:
    """Whether `fn` is an `async def` (`functools.partial` of one too) or an object whose `__call__` is one: what
    `inspect.iscoroutinefunction` alone misses, and whose coroutine was scored as a wrong return value. A plain
    function that returns a coroutine (a sync decorator over an async def) is not: its result is awaited where it
    runs, and a sync bridge (`asyncio.run` inside) keeps working on a thread of its own."""
    if inspect.iscoroutinefunction(fn):
        return True
    if isinstance(fn, type) or inspect.isroutine(fn):
        return False  # a class builds an instance; a function or method said above what it is
    return inspect.iscoroutinefunction(type(fn).__call__)  # the type's: an instance's __getattr__ does not answer it
