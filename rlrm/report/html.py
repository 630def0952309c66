"""report.html: the Document as one self-contained page (inline CSS, figures embedded, no scripts).

Nothing in it points outside the file, so it opens offline and can be mailed or archived as is.
"""

from __future__ import annotations

import html

from rlrm.report.document import Document, FigureRef, Table, fmt

_CSS = """
body { font-family: -apple-system, 'Segoe UI', Helvetica, Arial, sans-serif; margin: 2em auto; max-width: 1100px;
       color: #222; padding: 0 1em; }
h1 { border-bottom: 2px solid #ddd; padding-bottom: .3em; }
h2 { margin-top: 2em; border-bottom: 1px solid #eee; }
.table { overflow-x: auto; max-width: 100%; }  /* a wide table scrolls in its box; the page keeps its width */
table { border-collapse: collapse; margin: 1em 0; font-size: 0.9em; }
th, td { border: 1px solid #ccc; padding: 4px 8px; text-align: right; }
th { background: #f4f4f4; }
td:first-child, th:first-child { text-align: left; }
figure { margin: 1.5em 0; }
figure img, figure svg { max-width: 100%; height: auto; }
figcaption { color: #666; font-size: 0.85em; }
.notes li { color: #7a5b00; }
"""


def to_html(doc: Document) -> str:
    """The whole page as a string."""
    parts = [
        "<!DOCTYPE html>",
        '<html lang="en"><head><meta charset="utf-8">',
        f"<title>{html.escape(doc.title)}</title>",
        f"<style>{_CSS}</style></head><body>",
        f"<h1>{html.escape(doc.title)}</h1>",
    ]
    for section in doc.sections:
        parts.append(f"<h2>{html.escape(section.title)}</h2>")
        parts.extend(_block(block) for block in section.blocks)
    if doc.notes:
        parts.append('<h2>Notes</h2><ul class="notes">')
        parts.extend(f"<li>{html.escape(note)}</li>" for note in doc.notes)
        parts.append("</ul>")
    parts.append("</body></html>")
    return "\n".join(parts)


def _block(block) -> str:
    if isinstance(block, Table):
        head = "".join(f"<th>{html.escape(h)}</th>" for h in block.headers)
        cells = ("".join(f"<td>{html.escape(fmt(v, block.digits))}</td>" for v in row) for row in block.rows)
        rows = "".join(f"<tr>{row}</tr>" for row in cells)
        return f'<div class="table"><table><thead><tr>{head}</tr></thead><tbody>{rows}</tbody></table></div>'
    if isinstance(block, FigureRef):
        body = block.embed or f"<p>(figure {html.escape(block.file)} not embedded)</p>"
        return (
            f'<figure id="{html.escape(block.name)}">{body}<figcaption>{html.escape(block.file)}</figcaption></figure>'
        )
    return f"<p>{html.escape(block)}</p>"
