"""graphviz in the browser (the vendored @hpcc-js/wasm-graphviz, graphviz 16 compiled to
WebAssembly) against the machine's `dot`, on the same DOT of the big models: what the notebook
widget does where the kernel has no `dot`, against what the server (and a kernel with `dot`)
does. Prints a table; not a timed test.

    .venv/bin/python bench/browser_graphviz.py [--only transformer12,lstm200] [--repeat 3]

For each model of bench/big_models.py, two graphs: the first view a user sees (by module when
big, as the page and the widget open) and the whole flat graph. Each is made into DOT once
(`app.render.drawable_dot`, what both sides lay out) and then:

- `dot -Tsvg`, as the server runs it (a process per drawing, as `app.render.draw.render`);
- in Debian's Chromium (headless, through Playwright), `static/js/browser_layout.js`'s
  `layoutSvg`: the widget's own code, the module loaded as the widget loads it (from its text).
  The module's load (fetch, compile, instantiate) is timed once, apart.

Both times are best of --repeat. The drawings are compared too: the same node ids (the page's
and the widget's clicks and highlights find nodes by id), and the area of each (graphviz 16's
layout is not 2.43's: the pictures differ, the graph does not).
"""

from __future__ import annotations

import argparse
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from tests.server import serve_folder  # noqa: E402

CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = ["--no-sandbox", "--disable-gpu", "--disable-background-networking",
                 "--disable-component-update", "--disable-sync", "--no-first-run"]
GRAPHVIZ = "vendor/hpcc-js-wasm-graphviz-1.29.2/graphviz.js"
MODELS = ("transformer12", "transformer48", "lstm200", "resnet")

LOAD = """async (url) => {
  const started = performance.now();
  const layout = await import("/js/browser_layout.js");
  const text = await (await fetch(url)).text();
  window.graphviz = await layout.loadGraphviz(text);
  window.layoutSvg = layout.layoutSvg;
  return { seconds: (performance.now() - started) / 1000, version: window.graphviz.version() };
}"""

LAYOUT = """([dot, repeat]) => {
  let best = Infinity, svg = "";
  for (let i = 0; i < repeat; i++) {
    const started = performance.now();
    svg = window.layoutSvg(window.graphviz, dot);
    best = Math.min(best, performance.now() - started);
  }
  return { seconds: best / 1000, svg };
}"""


def _dots(name: str) -> list[tuple[str, int, str]]:
    """(which view, nodes, DOT) for the model's first view and its flat graph."""
    import big_models

    from app.render import choose_grouping, drawable_dot, group_graph
    from app.trace.tracer import trace_script

    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / f"{name}.py"
        path.write_text(big_models._script(name))
        doc = trace_script(path)
    graph = next(e for e in doc["events"] if e["kind"] == "backward")["graph"]
    grouping = choose_grouping(graph)
    first = graph if grouping.flat else group_graph(graph, grouping)
    views = [("first view" + ("" if grouping.flat else " (by module)"), first)]
    if not grouping.flat:
        views.append(("flat", graph))
    return [(what, len(g["nodes"]), drawable_dot(g)) for what, g in views]


def _dot_seconds(dot: str, repeat: int) -> tuple[float, str]:
    best, svg = float("inf"), ""
    for _ in range(repeat):
        started = time.perf_counter()
        done = subprocess.run(["dot", "-Tsvg"], input=dot.encode(), capture_output=True,
                              check=True, timeout=600)
        best = min(best, time.perf_counter() - started)
        svg = done.stdout.decode()
    return best, svg


def _ids(svg: str) -> set[str]:
    return set(re.findall(r'<g id="([^"]+)" class="node', svg))


def _area(svg: str) -> float:
    box = re.search(r'viewBox="([-\d.]+) ([-\d.]+) ([-\d.]+) ([-\d.]+)"', svg)
    return float(box[3]) * float(box[4])


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", default=",".join(MODELS))
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    from playwright.sync_api import sync_playwright

    dot_version = subprocess.run(["dot", "-V"], capture_output=True, text=True).stderr.strip()
    rows = []
    with serve_folder(ROOT / "static") as base, sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=CHROMIUM, headless=True,
                                     args=CHROMIUM_ARGS)
        page = browser.new_page()
        page.goto(base + "/css/app.css")  # any page of the folder's origin
        loaded = page.evaluate(LOAD, f"{base}/{GRAPHVIZ}")
        for name in args.only.split(","):
            for what, nodes, dot in _dots(name):
                kernel_s, kernel_svg = _dot_seconds(dot, args.repeat)
                drawn = page.evaluate(LAYOUT, [dot, args.repeat])
                same = _ids(kernel_svg) == _ids(drawn["svg"])
                rows.append((name, what, nodes, kernel_s, drawn["seconds"], same,
                             _area(drawn["svg"]) / _area(kernel_svg)))
                print(f"  {name} {what}: {nodes} nodes, dot {kernel_s:.2f} s, browser "
                      f"{drawn['seconds']:.2f} s", file=sys.stderr, flush=True)
        browser.close()

    print(f"\nmachine's {dot_version}; in the browser graphviz {loaded['version']} "
          f"(Chromium, WebAssembly); best of {args.repeat}")
    print(f"loading the WebAssembly module once per page: {loaded['seconds']:.2f} s\n")
    print("| model | view | nodes | `dot` (s) | browser (s) | browser ÷ dot | same node ids "
          "| area, browser ÷ dot |")
    print("|---|---|---|---|---|---|---|---|")
    for name, what, nodes, kernel_s, browser_s, same, area in rows:
        print(f"| {name} | {what} | {nodes:,} | {kernel_s:.2f} | {browser_s:.2f} | "
              f"{browser_s / kernel_s:.2f}× | {'yes' if same else 'NO'} | {area:.2f} |")
    return 0 if all(row[5] for row in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
