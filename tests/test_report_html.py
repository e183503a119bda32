"""The report's HTML page (fedcore.report.html): rendered Markdown, figures embedded as data URIs,
sortable tables with sticky headers, one file; checked as text and in headless Chromium (its DOM
after the page's script ran)."""

from __future__ import annotations

import base64
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from fedcore.report.html import embed_images, render_markdown, report_page

CHROMIUM_FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
                  "--disable-component-update", "--disable-sync", "--no-first-run"]
PNG = base64.b64decode(  # a 1x1 PNG
    "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNk+M9QDwADhgGAWjR9awAAAABJRU5ErkJggg==")

MARKDOWN = """# Sweep `small`

6 cells planned: **6 finished**.

## Ranking per setting

### digits, Dirichlet 0.1

| # | row | n | endpoint (mean) |
|---:|---|---:|---:|
| 1 | craft | 3 | 0.9000 |
| 2 | fedavg | 3 | 10.5000 |
| 3 | fedprox | 3 | 2.0000 |

- a list item with a [link](https://example.org)

![convergence](convergence.png)

![elsewhere](missing.png)
"""


def chromium() -> str:
    """The Chromium binary; the test skips, saying how to install it, where there is none."""
    found = shutil.which("chromium") or shutil.which("chromium-browser")
    if found is None:
        pytest.skip("chromium is not installed and could not be installed here "
                    "(scripts/setup_browser.sh installs Debian's with apt-get)")
    return found


def chromium_dom(page: Path, tmp_path: Path) -> str:
    """The DOM of ``page`` as headless Chromium has it after the page's scripts ran."""
    done = subprocess.run(
        [chromium(), *CHROMIUM_FLAGS, f"--user-data-dir={tmp_path / 'chromium-profile'}",
         "--dump-dom", page.resolve().as_uri()],
        capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 0 and "<body" in done.stdout, done.stderr[-2000:]
    return done.stdout


def test_the_page_renders_the_markdown_and_embeds_its_figures(tmp_path):
    (tmp_path / "convergence.png").write_bytes(PNG)
    page = report_page(MARKDOWN, "Sweep <small>", tmp_path)
    assert page.startswith("<!DOCTYPE html>") and '<meta charset="utf-8">' in page
    assert "<title>Sweep &lt;small&gt;</title>" in page
    assert "<pre" not in page and "**" not in page and "|---" not in page
    assert "<strong>6 finished</strong>" in page and "<code>small</code>" in page
    assert '<a href="https://example.org">link</a>' in page
    assert page.count('<table class="sortable">') == 1 and "<th>row</th>" in page
    assert f'src="data:image/png;base64,{base64.b64encode(PNG).decode()}"' in page
    assert 'src="missing.png"' in page  # no such file: left as it is
    assert "position: sticky" in page and "<script>" in page
    assert not re.search(r"(src|href)=\"(https?:)?//(?!example\.org)", page)  # no CDN


def test_only_png_files_of_the_folder_are_embedded(tmp_path):
    (tmp_path / "a.png").write_bytes(PNG)
    body = render_markdown("![a](a.png) ![b](../a.png) ![c](a.svg)")
    out = embed_images(body, tmp_path)
    assert out.count("data:image/png;base64,") == 1
    assert 'src="../a.png"' in out and 'src="a.svg"' in out


def test_chromium_sorts_a_column_by_its_numbers_on_a_click(tmp_path):
    page = report_page(MARKDOWN, "t", tmp_path).replace(
        "</body>", "<script>var h = document.querySelectorAll('th')[3]; h.click();"
        "document.body.setAttribute('data-once', document.querySelector('tbody').textContent);"
        "h.click();</script></body>")
    path = tmp_path / "page.html"
    path.write_text(page, encoding="utf-8")
    dom = chromium_dom(path, tmp_path)
    assert 'data-sortable="ready"' in dom  # the script ran on the table
    ascending = re.search(r'data-once="([^"]*)"', dom)
    assert ascending is not None
    assert re.findall(r"craft|fedavg|fedprox", ascending.group(1)) == ["craft", "fedprox",
                                                                       "fedavg"]  # 0.9, 2, 10.5
    body = dom.split("<tbody>")[1].split("</tbody>")[0]
    assert re.findall(r"craft|fedavg|fedprox", body) == ["fedavg", "fedprox", "craft"]
    assert 'aria-sort="descending"' in dom
