// What torch.utils.checkpoint changed in a pass: the tensors a region's nodes no longer keep,
// the inputs the checkpoint keeps instead, and the module forwards it ran again during the
// backward (the Trace's graph.checkpoints, node.checkpoint and event.recomputed).
// tests/scenarios/test_checkpointing.py checks those against PyTorch; tests/browser/
// test_checkpoint_page.py checks that these sentences say what the Trace holds.

import { bytesText, h } from "./dom.js";

const plural = (n, word, many = `${word}s`) => `${n} ${n === 1 ? word : many}`;

/** "blocks.1 (Block), blocks.1.up (Linear)": each module once, in the order it ran again. */
function modulesText(entries) {
  const seen = new Map();
  for (const e of entries) if (!seen.has(e.module)) seen.set(e.module, e.type);
  return [...seen].map(([m, t]) => `${m} (${t})`).join(", ");
}

/** Bytes of a region's kept inputs, each allocation once. */
function inputBytes(regions) {
  const sizes = new Map();
  for (const r of regions) for (const t of r.inputs) if (t.storage !== undefined) sizes.set(t.storage, t.bytes);
  return [...sizes.values()].reduce((a, b) => a + b, 0);
}

/** The paragraph a node made inside a checkpoint, or a reentrant checkpoint's node, adds to its
 *  panel; null for any other node. */
export function checkpointNodeView(event, node) {
  const recomputed = event.recomputed || [];
  if (node.checkpoint !== undefined) {
    const region = ((event.graph.checkpoints || [])[node.checkpoint]) || { inputs: [] };
    const again = recomputed.filter((e) => e.checkpoint === node.checkpoint);
    const packed = (node.saved || []).filter((t) => t.packed).length;
    return h("div.checkpoint-note", { dataset: { checkpoint: String(node.checkpoint) } },
      h("h4", {}, `Inside checkpoint region ${node.checkpoint}`),
      h("p", {}, "Made inside torch.utils.checkpoint (use_reentrant=False). ",
        packed ? `The checkpoint's hook took this node's ${plural(packed, "saved tensor")} and kept none of them. ` : "",
        region.inputs.length ? `The region keeps only its ${plural(region.inputs.length, "input")} ` +
          `(${bytesText(inputBytes([region]))}), and reading a saved tensor during backward runs the region's forward again from ${region.inputs.length === 1 ? "it" : "them"}.` :
          "Reading a saved tensor during backward runs the region's forward again."),
      again.length ? h("p.recomputed", {}, `During backward #${event.index} these module forwards ran again: `,
        h("span.recomputed-modules", {}, modulesText(again)), ".") : "");
  }
  const again = recomputed.filter((e) => e.node === node.id);
  if (node.name === "CheckpointFunctionBackward" && again.length) {
    return h("div.checkpoint-note", { dataset: { checkpointNode: node.id } },
      h("h4", {}, "A reentrant checkpoint"),
      h("p", {}, "torch.utils.checkpoint with use_reentrant=True ran the region's forward under no_grad, so this one node " +
        "stands for the region and saved only the region's inputs (below). ",
        `During backward #${event.index} it ran the forward again: `,
        h("span.recomputed-modules", {}, modulesText(again)),
        event.nested ? ", and a backward of its own inside this pass." : "."));
  }
  return null;
}

/** For a pass's details: what its non-reentrant checkpoints kept and ran again; null if none. */
export function checkpointPassParts(ev) {
  const regions = (ev.graph && ev.graph.checkpoints) || [];
  if (!regions.length) return null;
  const packed = ev.graph.nodes.filter((n) => n.checkpoint !== undefined)
    .reduce((sum, n) => sum + (n.saved || []).filter((t) => t.packed).length, 0);
  const again = (ev.recomputed || []).filter((e) => e.checkpoint !== undefined);
  return h("p.checkpoint-pass", { dataset: { regions: String(regions.length), inputs: String(inputBytes(regions)) } },
    `${plural(regions.length, "checkpoint region")} kept only ${regions.length === 1 ? "its" : "their"} inputs, ` +
    `${bytesText(inputBytes(regions))} (counted above), instead of keeping the ${plural(packed, "tensor")} ${regions.length === 1 ? "its" : "their"} nodes saved. `,
    again.length ? ["Their forward ran again during this backward: ", h("span.recomputed-modules", {}, modulesText(again)), "."] : "");
}
