"""The lines of a JSON-lines file as rlrm's readers take them: a byte-order mark (Windows editors) is no data, lines
end at `\\n` (and `\\r\\n`) only, never at the U+2028 or U+0085 a JSON string holds raw, and blank lines are no rows.

    for lineno, line in jsonl_lines(path, "row"):     # (number in the file, text), each non-blank line
        row = json.loads(line)
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

from rlrm.errors import DataError


def jsonl_lines(path: Path, unit: str = "line") -> Iterator[tuple[int, str]]:
    """(line number, text) of each non-blank line; a line that is not UTF-8 is a DataError naming `path` and it
    (`unit`: how the caller's messages name a line, "line" or "row")."""
    data = Path(path).read_bytes().removeprefix(b"\xef\xbb\xbf")
    for lineno, raw in enumerate(data.splitlines(), 1):
        try:
            line = raw.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise DataError(
                f"{path} {unit} {lineno}: not UTF-8 text (byte {exc.start} of the line is {raw[exc.start]:#04x}); "
                "save the file as UTF-8"
            ) from None
        if line.strip():
            yield lineno, line
