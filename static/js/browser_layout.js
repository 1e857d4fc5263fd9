// Graphviz in the browser: the vendored @hpcc-js/wasm-graphviz (graphviz compiled to
// WebAssembly, static/vendor/hpcc-js-wasm-graphviz-1.29.2/). The notebook widget lays out its
// graph here when the kernel's machine has no `dot`; the run page never loads it, since the
// server's graphviz draws once for every student and phone (bench/browser_graphviz.py).
//
// The module arrives as text (a widget's files travel through the kernel, not over HTTP), so it
// is imported from a blob: URL, or a data: URL where a page's policy refuses blobs. One copy is
// loaded per browser page, however many widgets ask.

const LOADED = Symbol.for("autograd-lab.graphviz");

// what app/render/draw.py's check_inert refuses in graphviz's output: the drawing goes into
// the page, so it may not link anywhere or run anything
const ACTIVE = new Set(["script", "foreignobject", "iframe", "object", "embed", "image", "use",
  "animate", "set", "handler", "listener"]);

async function importText(text) {
  const blob = URL.createObjectURL(new Blob([text], { type: "text/javascript" }));
  try {
    return await import(blob);
  } catch (err) {
    const bytes = new TextEncoder().encode(text);
    let binary = "";
    for (let i = 0; i < bytes.length; i += 0x8000) {
      binary += String.fromCharCode(...bytes.subarray(i, i + 0x8000));
    }
    return import(`data:text/javascript;base64,${btoa(binary)}`);
  } finally {
    URL.revokeObjectURL(blob);
  }
}

/** The Graphviz instance of the vendored module whose text is `moduleText`; loaded once. */
export function loadGraphviz(moduleText) {
  if (!globalThis[LOADED]) {
    globalThis[LOADED] = importText(moduleText).then((m) => m.Graphviz.load());
    globalThis[LOADED].catch(() => { globalThis[LOADED] = null; }); // a later widget tries again
  }
  return globalThis[LOADED];
}

/** Throw if the SVG holds an element or attribute that could act (as check_inert does). */
export function checkInert(svgText) {
  const root = new DOMParser().parseFromString(svgText, "image/svg+xml").documentElement;
  if (root.nodeName !== "svg") throw new Error("graphviz wrote a drawing that does not parse");
  for (const el of [root, ...root.querySelectorAll("*")]) {
    const tag = el.localName.toLowerCase();
    const names = [...el.attributes].map((a) => a.localName.toLowerCase());
    if (ACTIVE.has(tag) || names.some((n) => n === "href" || n.startsWith("on"))) {
      throw new Error("this drawing would carry a link or a script, so it is not shown; " +
        "names in the trace may have been forged");
    }
  }
  return svgText;
}

/** DOT made by app/render (drawable_dot), laid out as SVG by the graphviz above. */
export function layoutSvg(graphviz, dotText) {
  return checkInert(graphviz.dot(dotText, "svg"));
}
