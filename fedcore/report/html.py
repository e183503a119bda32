"""The report as one self-contained HTML page: its Markdown rendered (tables, lists, links,
code), the figures it links embedded as base64 ``data:`` URIs, tables with sticky headers and
columns sorted by a click (a small inline script), no external file, font or network access.

A colleague opens it from an e-mail as it is.
"""

from __future__ import annotations

import base64
import html
import re
from pathlib import Path

_IMG = re.compile(r'(<img\b[^>]*?\bsrc=")([^"]+)(")')
_TABLE = re.compile(r"<table>(.*?)</table>", re.S)

STYLE = """
body { font: 15px/1.5 system-ui, -apple-system, "Segoe UI", Roboto, sans-serif;
       color: #1d1d1f; margin: 0 auto; padding: 1.5em 2em 4em; max-width: 110em; }
h1 { font-size: 1.7em; border-bottom: 2px solid #ccc; padding-bottom: .2em; }
h2 { font-size: 1.35em; margin-top: 2em; border-bottom: 1px solid #ddd; }
h3 { font-size: 1.1em; margin-top: 1.6em; }
code { background: #f2f2f4; border-radius: 3px; padding: 0 .25em; font-size: .92em; }
img { max-width: 100%; height: auto; display: block; margin: .8em 0; }
.table-wrap { overflow: auto; max-height: 85vh; margin: .8em 0 1.2em;
              border: 1px solid #ddd; }
table { border-collapse: collapse; font-size: 13px; font-variant-numeric: tabular-nums; }
th, td { padding: .3em .6em; border-bottom: 1px solid #e4e4e8; text-align: left;
         white-space: nowrap; vertical-align: top; }
th { position: sticky; top: 0; z-index: 1; background: #eef0f4; cursor: pointer;
     user-select: none; box-shadow: inset 0 -1px 0 #bbb; }
th[aria-sort="ascending"]::after { content: " \\25B2"; }
th[aria-sort="descending"]::after { content: " \\25BC"; }
tbody tr:nth-child(even) { background: #fafafb; }
tbody tr:hover { background: #fff7d6; }
"""

# Sorts a table by the clicked header: by the cell's first number where both cells have one
# ("0.8123 ± 0.0100", "median 14 (3/3 reached)", "> 20"), else by text; a second click reverses.
SORT_SCRIPT = """
(function () {
  function key(cell) {
    var text = cell.textContent.trim();
    var m = text.match(/[-+\\u2212]?\\d+(?:\\.\\d+)?(?:e[-+]?\\d+)?/i);
    return {num: m ? parseFloat(m[0].replace("\\u2212", "-")) : NaN, text: text};
  }
  function compare(a, b) {
    if (!isNaN(a.num) && !isNaN(b.num) && a.num !== b.num) { return a.num - b.num; }
    return a.text.localeCompare(b.text, undefined, {numeric: true});
  }
  function sortBy(table, th) {
    var col = Array.prototype.indexOf.call(th.parentNode.children, th);
    var dir = th.getAttribute("aria-sort") === "ascending" ? -1 : 1;
    var body = table.tBodies[0];
    var rows = Array.prototype.slice.call(body.rows);
    rows.sort(function (r, s) {
      return dir * compare(key(r.cells[col]), key(s.cells[col]));
    });
    rows.forEach(function (r) { body.appendChild(r); });
    Array.prototype.forEach.call(th.parentNode.children, function (h) {
      h.removeAttribute("aria-sort");
    });
    th.setAttribute("aria-sort", dir === 1 ? "ascending" : "descending");
  }
  Array.prototype.forEach.call(document.querySelectorAll("table.sortable"), function (t) {
    if (!t.tHead || !t.tBodies.length) { return; }
    Array.prototype.forEach.call(t.tHead.rows[0].cells, function (th) {
      th.title = "sort by this column (click again to reverse)";
      th.addEventListener("click", function () { sortBy(t, th); });
    });
    t.setAttribute("data-sortable", "ready");
  });
})();
"""


def render_markdown(text: str) -> str:
    """``text`` (the report's Markdown: headings, pipe tables, lists, emphasis, code, links,
    images) as HTML; every table scrollable in its own box, marked sortable."""
    import markdown

    body = markdown.markdown(text, extensions=["tables", "sane_lists"], output_format="html")
    return _TABLE.sub(lambda m: f'<div class="table-wrap"><table class="sortable">{m.group(1)}'
                      "</table></div>", body)


def embed_images(body: str, folder: Path) -> str:
    """``body`` with each ``<img>`` whose ``src`` names a PNG file of ``folder`` carrying that
    file as a base64 ``data:`` URI (other sources are left as they are)."""

    def inline(m: re.Match[str]) -> str:
        src = html.unescape(m.group(2))
        path = folder / src
        if "/" in src or not src.endswith(".png") or not path.is_file():
            return m.group(0)
        data = base64.b64encode(path.read_bytes()).decode("ascii")
        return f"{m.group(1)}data:image/png;base64,{data}{m.group(3)}"

    return _IMG.sub(inline, body)


def report_page(markdown_text: str, title: str, folder: Path) -> str:
    """The complete, self-contained HTML document of a report whose Markdown is
    ``markdown_text`` and whose figures lie in ``folder``."""
    body = embed_images(render_markdown(markdown_text), folder)
    return ('<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">'
            '<meta name="viewport" content="width=device-width, initial-scale=1">'
            f"<title>{html.escape(title)}</title>\n<style>{STYLE}</style></head>\n<body>\n"
            f"{body}\n<script>{SORT_SCRIPT}</script>\n</body></html>\n")
