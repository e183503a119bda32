"""Screenshot one page of a JavaScript UI with headless Chromium, optionally after clicking a tab.

``chromium --screenshot`` cannot click, and some tabs (the Task Runs tab of a Prefect flow run)
ignore the URL's ``?tab=``: so this drives Chromium over its DevTools protocol (``websockets``,
installed with Prefect). Usage:
    python scripts/ui_shot.py OUT.png URL [--click "Task Runs"] [--size 1400x900] [--wait 8]
"""

from __future__ import annotations

import argparse
import base64
import json
import subprocess
import tempfile
import time
import urllib.request
from pathlib import Path

from websockets.sync.client import connect

CHROMIUM_FLAGS = [
    "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
    "--disable-background-networking", "--disable-component-update", "--disable-sync",
    "--hide-scrollbars",
]
CLICK_JS = """(() => {
  const el = [...document.querySelectorAll('button, a, [role=tab], li, span')]
    .find(e => e.textContent.trim() === %s);
  if (el) { el.click(); return true; } return false; })()"""


class Page:
    """One Chromium tab reached through the DevTools websocket."""

    def __init__(self, ws_url: str) -> None:
        self.ws = connect(ws_url, max_size=None)
        self.next_id = 0

    def call(self, method: str, **params: object) -> dict:
        self.next_id += 1
        self.ws.send(json.dumps({"id": self.next_id, "method": method, "params": params}))
        while True:
            msg = json.loads(self.ws.recv())
            if msg.get("id") == self.next_id:
                if "error" in msg:
                    raise RuntimeError(f"{method}: {msg['error']}")
                return msg["result"]


def page_target(port: int, timeout: float = 30.0) -> str:
    """The websocket URL of Chromium's first page, once its DevTools endpoint answers."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/json") as response:
                targets = json.load(response)
            return next(t["webSocketDebuggerUrl"] for t in targets if t["type"] == "page")
        except (OSError, StopIteration):
            if time.monotonic() > deadline:
                raise
            time.sleep(0.5)


def screenshot(out: Path, url: str, click: str | None, size: str, wait: float, port: int) -> None:
    """Open url, wait, click the element whose text is click (if any), wait, save a PNG."""
    width, height = (int(v) for v in size.split("x"))
    with tempfile.TemporaryDirectory() as profile:
        browser = subprocess.Popen(
            ["chromium", *CHROMIUM_FLAGS, f"--user-data-dir={profile}",
             f"--remote-debugging-port={port}", f"--window-size={width},{height}", "about:blank"],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        )
        try:
            page = Page(page_target(port))
            page.call("Emulation.setDeviceMetricsOverride", width=width, height=height,
                      deviceScaleFactor=1, mobile=False)
            page.call("Page.navigate", url=url)
            time.sleep(wait)
            if click is not None:
                found = page.call("Runtime.evaluate", expression=CLICK_JS % json.dumps(click))
                if not found["result"].get("value"):
                    raise SystemExit(f"ui_shot: no element with text {click!r} on {url}")
                time.sleep(wait)
            png = page.call("Page.captureScreenshot", format="png")["data"]
            out.write_bytes(base64.b64decode(png))
        finally:
            browser.terminate()
            browser.wait(timeout=30)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out", type=Path)
    parser.add_argument("url")
    parser.add_argument("--click", help="text of a tab or button to click before the screenshot")
    parser.add_argument("--size", default="1400x900", help="viewport WIDTHxHEIGHT")
    parser.add_argument("--wait", type=float, default=8.0, help="seconds to let the page render")
    parser.add_argument("--port", type=int, default=9227, help="Chromium's DevTools port")
    args = parser.parse_args()
    screenshot(args.out, args.url, args.click, args.size, args.wait, args.port)


if __name__ == "__main__":
    main()
