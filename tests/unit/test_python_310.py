"""rlrm supports Python 3.10 (pyproject's requires-python); CI runs 3.11. What differs and a 3.11 run cannot see is
checked here on the source: before 3.11, asyncio.wait_for's timeout raises asyncio.TimeoutError, a class apart from
the builtin TimeoutError, so `except TimeoutError` around it lets the timeout through (the in-process engine's batch
wait died so on 3.10 whenever a batch did not fill)."""

from __future__ import annotations

import ast
from pathlib import Path

import rlrm

ROOT = Path(rlrm.__file__).parent


def _caught(handler: ast.ExceptHandler) -> set[str]:
    kinds = handler.type.elts if isinstance(handler.type, ast.Tuple) else [handler.type]
    return {ast.unparse(k) for k in kinds if k is not None}


def _waits_for(body: list[ast.stmt]) -> bool:
    for node in ast.walk(ast.Module(body=body, type_ignores=[])):
        call = node if isinstance(node, ast.Call) else None
        if call is not None and isinstance(call.func, ast.Attribute) and call.func.attr == "wait_for":
            return True
    return False


def wait_for_caught_as_builtin(source: str) -> list[int]:
    """Lines of `try` blocks that await asyncio.wait_for and catch the builtin TimeoutError but not asyncio's."""
    lines = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Try) and _waits_for(node.body):
            caught = set().union(*(_caught(h) for h in node.handlers if h.type is not None))
            if "TimeoutError" in caught and "asyncio.TimeoutError" not in caught:
                lines.append(node.lineno)
    return lines


def test_the_check_finds_the_3_10_mistake_and_passes_the_right_form():
    wrong = "async def f(e):\n    try:\n        await asyncio.wait_for(e.wait(), 1)\n    except TimeoutError:\n        pass\n"
    right = wrong.replace("except TimeoutError", "except asyncio.TimeoutError")
    assert wait_for_caught_as_builtin(wrong) == [2] and wait_for_caught_as_builtin(right) == []


def test_no_wait_for_timeout_is_caught_as_the_builtin_timeout_error():
    found = {
        str(path.relative_to(ROOT.parent)): lines
        for path in sorted(ROOT.rglob("*.py"))
        if (lines := wait_for_caught_as_builtin(path.read_text()))
    }
    assert not found, f"catch asyncio.TimeoutError around asyncio.wait_for (Python 3.10): {found}"
