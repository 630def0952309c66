"""The run's metrics file: one JSON object per step in `<run>/metrics.jsonl`, flushed every step.

A resumed run first cuts the file back to the rows its checkpoint covers, so the file always
reads as one run with no duplicate steps.
"""

from __future__ import annotations

import json
import math
import os
from pathlib import Path

from rlrm.errors import RunFolderError, write_whole, writing_to


class MetricsWriter:
    """Appends step rows to a JSONL file; non-finite floats are written as null."""

    def __init__(self, path: Path, keep_through_step: int | None = None):
        self.path = Path(path)
        if keep_through_step is not None and self.path.exists():
            self._truncate(keep_through_step)
        self._file = self.path.open("a", encoding="utf-8")

    def log(self, row: dict) -> None:
        """Write one row and flush it to disk."""
        clean = {k: _jsonable(v) for k, v in row.items()}
        with writing_to(self.path):
            self._file.write(json.dumps(clean) + "\n")
            self._file.flush()
        if os.fstat(self._file.fileno()).st_nlink == 0:  # the rows went to a file no folder holds any more
            raise RunFolderError(
                f"{self.path} was removed while the run went on (its run folder deleted?); the run stops here: "
                "start it again"
            )

    def close(self) -> None:
        self._file.close()

    def _truncate(self, step: int) -> None:
        kept = [row for row in read_metrics(self.path) if row.get("step", 0) <= step]
        text = "".join(json.dumps(r) + "\n" for r in kept)
        write_whole(self.path, lambda tmp: tmp.write_text(text, encoding="utf-8"))


def read_metrics(path: Path) -> list[dict]:
    """The complete rows of a metrics file (a truncated last line is ignored)."""
    rows = []
    for line in Path(path).read_text(encoding="utf-8").splitlines():
        try:
            rows.append(json.loads(line))
        except json.JSONDecodeError:
            continue
    return rows


def _jsonable(value):
    """`value` as JSON holds it: tensors and numpy values (scalars, arrays: lists) as Python ones, inside lists and
    dicts too; a non-finite float as None."""
    if isinstance(value, dict):
        return {k: _jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_jsonable(v) for v in value]
    if hasattr(value, "tolist") and hasattr(value, "item"):  # tensors and numpy values: one number or a list
        return _jsonable(value.tolist())
    if isinstance(value, float) and not math.isfinite(value):
        return None
    return value
