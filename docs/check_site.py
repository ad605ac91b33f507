"""Check the built documentation site in headless Chromium, as a newcomer's browser shows it::

    python -m sphinx -b html docs docs/_build/html
    python docs/check_site.py docs/_build/html --screenshots /tmp/site   # exits 1 when a check fails

For the landing, Quickstart, API and Results pages (and Performance) at a 1280 x 800 window: every image loads, no
code block is wider than its box without a scrollbar, the Quickstart page shows a Python snippet on its first
screen, and the Results and Performance pages show a figure before their first table. ``--screenshots DIR`` keeps a
PNG of each page's first screen. Needs ``chromium`` on the PATH (Debian: ``apt-get install chromium``) and the
``websockets`` package (the ``server`` extra brings it); it drives Chromium through its DevTools protocol.
"""

from __future__ import annotations

import argparse
import base64
import json
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path
from typing import Any

WIDTH, HEIGHT = 1280, 800
PAGES = {"landing": "index.html", "quickstart": "quickstart.html", "api": "api/index.html", "results": "results.html"}
PAGES["performance"] = "performance.html"
FIGURE_FIRST = ("results", "performance")
"""Pages whose first figure must come before their first table."""

PROBE = """(() => {
  const clipped = [...document.querySelectorAll('pre')].filter(pre => {
    if (pre.scrollWidth <= pre.clientWidth + 1) return false;
    for (let node = pre; node; node = node.parentElement) {
      const overflow = getComputedStyle(node).overflowX;
      if ((overflow === 'auto' || overflow === 'scroll') && node.scrollWidth > node.clientWidth) return false;
    }
    return true;
  }).map(pre => pre.textContent.slice(0, 60));
  const images = [...document.images].map(img => ({src: img.getAttribute('src'), ok: img.complete && img.naturalWidth > 0}));
  const top = el => el ? el.getBoundingClientRect().top + window.scrollY : null;
  const python = document.querySelector('div.highlight-python');
  return JSON.stringify({
    clipped, images,
    python_top: top(python),
    image_top: top(document.querySelector('div[role=main] img')),
    table_top: top(document.querySelector('div[role=main] table')),
  });
})()"""


class Browser:
    """One headless Chromium, driven over its DevTools websocket (one page, flat sessions)."""

    def __init__(self, executable: str) -> None:
        from websockets.sync.client import connect

        self.profile = tempfile.mkdtemp(prefix="check_site_")
        self.stack: ExitStack | None = None
        self.process = subprocess.Popen(
            [executable, "--headless=new", "--no-sandbox", "--disable-gpu", "--remote-debugging-port=0",
             f"--user-data-dir={self.profile}", f"--window-size={WIDTH},{HEIGHT}", "about:blank"],
            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
        )  # fmt: skip
        assert self.process.stderr is not None
        deadline, url = time.monotonic() + 30, None
        while url is None and time.monotonic() < deadline:
            line = self.process.stderr.readline()
            if line.startswith("DevTools listening on "):
                url = line.split(" on ", 1)[1].strip()
        if url is None:
            self.close()
            raise RuntimeError("chromium did not start its DevTools server within 30 s")
        self.stack = ExitStack()
        self.socket = self.stack.enter_context(connect(url, max_size=2**26))
        self.next_id = 0
        target = self.send("Target.createTarget", url="about:blank")["targetId"]
        self.session = self.send("Target.attachToTarget", targetId=target, flatten=True)["sessionId"]
        self.send(
            "Emulation.setDeviceMetricsOverride", session=True, width=WIDTH, height=HEIGHT, deviceScaleFactor=1, mobile=False
        )
        self.send("Page.enable", session=True)

    def send(self, method: str, session: bool = False, **params: Any) -> dict[str, Any]:
        self.next_id += 1
        message: dict[str, Any] = {"id": self.next_id, "method": method, "params": params}
        if session:
            message["sessionId"] = self.session
        self.socket.send(json.dumps(message))
        while True:
            reply = json.loads(self.socket.recv(timeout=60))
            if reply.get("id") == self.next_id:
                if "error" in reply:
                    raise RuntimeError(f"{method}: {reply['error']}")
                return dict(reply.get("result", {}))

    def open(self, url: str) -> None:
        self.send("Page.navigate", session=True, url=url)
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            state = self.evaluate("document.readyState + ':' + [...document.images].every(i => i.complete)")
            if state == "complete:true":
                return
            time.sleep(0.1)
        raise RuntimeError(f"{url} did not finish loading within 30 s")

    def evaluate(self, expression: str) -> Any:
        return self.send("Runtime.evaluate", session=True, expression=expression, returnByValue=True)["result"].get("value")

    def screenshot(self, path: Path) -> None:
        path.write_bytes(base64.b64decode(self.send("Page.captureScreenshot", session=True, format="png")["data"]))

    def close(self) -> None:
        if self.stack is not None:
            self.stack.close()
        self.process.kill()
        self.process.wait()
        shutil.rmtree(self.profile, ignore_errors=True)


@contextmanager
def browser(executable: str) -> Iterator[Browser]:
    instance = Browser(executable)
    try:
        yield instance
    finally:
        instance.close()


def check_site(site: Path, screenshots: Path | None = None, executable: str = "chromium") -> list[str]:
    """The problems found on the built ``site`` (an empty list when every check passes)."""
    problems: list[str] = []
    with browser(executable) as chrome:
        for name, page in PAGES.items():
            chrome.open((site / page).resolve().as_uri())
            facts = json.loads(chrome.evaluate(PROBE))
            problems += [f"{page}: code block clipped without a scrollbar: {text!r}" for text in facts["clipped"]]
            problems += [f"{page}: image does not load: {image['src']}" for image in facts["images"] if not image["ok"]]
            if name == "quickstart" and (facts["python_top"] is None or facts["python_top"] > HEIGHT):
                problems.append(f"{page}: no Python snippet on the first screen (top: {facts['python_top']})")
            if name in FIGURE_FIRST:
                image, table = facts["image_top"], facts["table_top"]
                if image is None or (table is not None and table < image):
                    problems.append(f"{page}: no figure before the first table (figure {image}, table {table})")
            if screenshots is not None:
                screenshots.mkdir(parents=True, exist_ok=True)
                chrome.screenshot(screenshots / f"{name}.png")
    return problems


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("site", type=Path, help="the built site (the directory holding index.html)")
    parser.add_argument("--screenshots", type=Path, default=None, help="keep a PNG of each page's first screen here")
    parser.add_argument("--chromium", default="chromium", help="the Chromium executable")
    args = parser.parse_args()
    problems = check_site(args.site, args.screenshots, args.chromium)
    for problem in problems:
        print(problem)
    print(f"{len(PAGES)} pages checked, {len(problems)} problem(s)")
    sys.exit(1 if problems else 0)


if __name__ == "__main__":
    main()
