"""Figure plumbing shared by every report figure: a new Figure, colours, saving, embedding.

Figures are `matplotlib.figure.Figure` objects made without pyplot, so no GUI backend and no
global figure registry is involved; saving goes through Agg (PNG), SVG or PDF canvases.
"""

from __future__ import annotations

import base64
import html
import io
import re
from pathlib import Path
from typing import TYPE_CHECKING, Any

from rlrm.errors import writing_to

if TYPE_CHECKING:
    from matplotlib.typing import RcKeyType

FORMATS = ("png", "svg", "pdf")
PALETTE = (
    "tab:blue",
    "tab:orange",
    "tab:green",
    "tab:red",
    "tab:purple",
    "tab:brown",
    "tab:pink",
    "tab:gray",
    "tab:olive",
    "tab:cyan",
)
_RC: dict[RcKeyType, Any] = {
    "svg.fonttype": "none",
    "axes.grid": True,
    "axes.axisbelow": True,
    "grid.alpha": 0.3,
    "path.simplify": True,
}


def new_figure(nrows: int = 1, ncols: int = 1, width: float = 8.0, height: float = 4.5, **kwargs):
    """A Figure with a grid of axes (returned as a 2-D array when squeeze=False)."""
    import matplotlib
    from matplotlib.figure import Figure

    with matplotlib.rc_context(_RC):
        fig = Figure(figsize=(width, height), layout="constrained")
        axes = fig.subplots(nrows, ncols, **kwargs)
    return fig, axes


def color(i: int) -> str:
    return PALETTE[i % len(PALETTE)]


def save_figure(fig, out_dir: Path, name: str, fmt: str) -> Path:
    """Write `fig` to `<out_dir>/<name>.<fmt>`."""
    import matplotlib

    path = Path(out_dir) / f"{name}.{fmt}"
    with matplotlib.rc_context(_RC), writing_to(path):
        fig.savefig(path, format=fmt, dpi=100)
    return path


def embeddable(fig, saved: Path, alt: str) -> str:
    """HTML for `fig` with nothing external: the saved SVG inline, the saved PNG as a data URI,
    or (for a PDF) a PNG rendered now."""
    import matplotlib

    saved = Path(saved)
    if saved.suffix == ".svg":
        svg = saved.read_text(encoding="utf-8")
        svg = svg[svg.index("<svg") :]  # drop the XML declaration and DOCTYPE
        return re.sub(r"<metadata>.*?</metadata>", "", svg, flags=re.DOTALL)
    if saved.suffix == ".png":
        png = saved.read_bytes()
    else:
        buf = io.BytesIO()
        with matplotlib.rc_context(_RC):
            fig.savefig(buf, format="png", dpi=100)
        png = buf.getvalue()
    data = base64.b64encode(png).decode("ascii")
    return f'<img alt="{html.escape(alt)}" src="data:image/png;base64,{data}">'


def note_axes(ax, text: str) -> None:
    """Write `text` in the middle of an empty axes (a panel with nothing to show)."""
    ax.text(0.5, 0.5, text, ha="center", va="center", transform=ax.transAxes, color="0.4")
    ax.set_xticks([])
    ax.set_yticks([])


class FigureSkipped(Exception):
    """A figure cannot be drawn from what the folder holds; the message says why (a note, not an error)."""
