"""Import a Python file a user names in a profile (a custom reward, a tool): one ConfigError line when it cannot be.
A helper module beside it imports while it runs (`_beside`).

    module = import_file("rewards/mine.py", "rlrm_custom_reward_mine", "reward.custom.path rewards/mine.py")

The file runs as it is imported: name only files you trust (docs/security.md).
"""

from __future__ import annotations

import contextlib
import functools
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
    """Whether calling `fn` gives a coroutine: an `async def`, also behind `functools.wraps` decorators and
    `functools.partial`, or an object whose `__call__` is one (a function kept as `inspect.iscoroutinefunction`
    judges it was called as a plain one, and its coroutine scored as a wrong return value)."""
    seen = 0
    while seen < 100:  # a chain of wrappers, partials and wrappers of partials
        seen += 1
        if isinstance(fn, functools.partial):
            fn = fn.func
        elif hasattr(fn, "__wrapped__"):
            fn = fn.__wrapped__
        else:
            break
    if inspect.iscoroutinefunction(fn):
        return True
    call = getattr(fn, "__call__", None)  # noqa: B004 - an instance's __call__, not whether it is callable
    return not inspect.isfunction(fn) and inspect.iscoroutinefunction(call)
