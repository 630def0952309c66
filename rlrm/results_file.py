"""A benchmark's results.csv read back, refusing a cut or non-finite file instead of using it.

    records = read_results(Path("bench/reward-latency-1/results.csv"))   # list of dicts, or RunFolderError
    text = read_complete_csv(Path("bench/reward-latency-1/results.csv"))  # the text, only the cut checks

Both `rlrm bench simulate --from` (read_results) and `rlrm report` (read_complete_csv) read it through here, so
the two refuse the same damaged file with the same line.

A results.csv that lost its last bytes (a copy cut short, a full disk) still parses: its last row holds a
truncated number ("0.70" of "0.7031") and the comparison built on it is quietly wrong. The file is written
by pandas with a newline after every row, so a missing final newline, a row with fewer fields than the
header, or a non-finite measurement is refused, naming the file and the row (1-based, header excluded).
"""

from __future__ import annotations

import csv
import io
import math
from pathlib import Path

from rlrm.errors import RunFolderError

# the measured columns a comparison divides by or averages: each must be a finite number in every row
MEASURED = ("tokens_per_s", "idle_trainer", "speedup_vs_sync")


def read_complete_csv(path: Path) -> str:
    """The text of `path`, after the UTF-8, final-newline and field-count checks of the module docstring."""
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except UnicodeDecodeError as exc:
        raise RunFolderError(
            f"{path} is not UTF-8 text (byte {exc.start}); rewrite it or rerun the benchmark"
        ) from None
    rows = list(csv.reader(io.StringIO(text)))
    if len(rows) < 2:
        raise RunFolderError(f"{path} has no result rows; rerun the benchmark")
    header, body = rows[0], rows[1:]
    if not text.endswith("\n"):
        raise RunFolderError(
            f"{path} row {len(body)} is cut short (the file does not end with a newline): the file was truncated; "
            "rerun the benchmark or copy the file again"
        )
    for number, row in enumerate(body, start=1):
        if len(row) != len(header):
            raise RunFolderError(
                f"{path} row {number} has {len(row)} fields, the header {len(header)}: the file is damaged; "
                "rerun the benchmark"
            )
    return text


def read_results(path: Path) -> list[dict]:
    """The rows of `path` as dicts (numbers parsed by pandas), after the checks in the module docstring."""
    import pandas as pd

    path = Path(path)
    text = read_complete_csv(path)
    header = next(csv.reader(io.StringIO(text)))
    records = pd.read_csv(io.StringIO(text)).to_dict("records")
    for number, record in enumerate(records, start=1):
        for column in MEASURED:
            value = record.get(column)
            if column in header and not (isinstance(value, (int, float)) and math.isfinite(value)):
                raise RunFolderError(
                    f"{path} row {number}: {column} is {value!r}, not a finite number; rerun that run of the benchmark"
                )
    return records
