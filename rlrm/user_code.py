"""Import a Python file a user names in a profile (a custom reward, a tool): one ConfigError line when it cannot be.
Its folder is put on sys.path (last), so a helper module beside it imports.

    module = import_file("rewards/mine.py", "rlrm_custom_reward_mine", "reward.custom.path rewards/mine.py")

The file runs as it is imported: name only files you trust (docs/security.md).
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

from rlrm.errors import ConfigError


def import_file(path: str | Path, module_name: str, label: str) -> ModuleType:
    """The module the file at `path` defines; `label` starts each error line (the setting and the file)."""
    folder = str(Path(path).resolve().parent)
    if folder not in sys.path:  # a helper module beside the file imports, as `python file.py` finds it; after
        sys.path.append(folder)  # Python's own modules, so a helper named `math.py` shadows nothing
    spec = importlib.util.spec_from_file_location(module_name, Path(path))
    if spec is None or spec.loader is None:
        raise ConfigError(f"{label} cannot be imported as a Python module")
    module = importlib.util.module_from_spec(spec)
    # registered before it runs, as `import` does: dataclasses under `from __future__ import annotations` look their
    # module up there, and pickle (worker processes) finds the file's functions by it
    sys.modules[module_name] = module
    try:
        spec.loader.exec_module(module)
    except Exception as exc:
        sys.modules.pop(module_name, None)
        raise ConfigError(f"{label} failed to import: {type(exc).__name__}: {exc}") from None
    return module
