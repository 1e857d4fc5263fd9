"""Regenerate docs/screenshot.png (the README's picture) from a running autograd-lab.

    .venv/bin/autograd-lab serve --port 8123 &
    .venv/bin/python docs/screenshot.py http://127.0.0.1:8123

Shows reused_layer with `middle_linear.weight` picked: the three uses numbered in the graph,
their bars summing to `.grad`, and the heat maps. Keep the file under ~300 KB: it lives in the
repository.
"""

from __future__ import annotations

import sys
from pathlib import Path

from playwright.sync_api import sync_playwright

OUT = Path(__file__).resolve().parent / "screenshot.png"
ARGS = ["--no-sandbox", "--disable-gpu", "--disable-background-networking",
        "--disable-component-update", "--disable-sync", "--no-first-run"]


def main(base: str) -> None:
    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path="/usr/bin/chromium", headless=True, args=ARGS)
        page = browser.new_page(viewport={"width": 1600, "height": 900})
        page.goto(f"{base}/scenarios/reused_layer?k=3&param=middle_linear.weight&node=n11")
        page.wait_for_selector("#details .acc-bar.use")
        page.wait_for_selector("#progress", state="hidden")
        page.wait_for_timeout(300)  # the graph pans to the chosen node on the next frames
        page.mouse.move(0, 0)
        page.screenshot(path=str(OUT))
        browser.close()
    print(f"wrote {OUT} ({OUT.stat().st_size // 1024} KB)")


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "http://127.0.0.1:8000")
