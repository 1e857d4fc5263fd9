// What a node's backward does, in one sentence, for the operations people ask about (issue 35).
// Each sentence is a claim about PyTorch: tests/trace/test_op_notes.py makes every node named
// here with torch itself and checks what the sentence says (ties, the boundary at 0, repeats).
// An operation not named here gets no sentence rather than a guess.

export const OP_NOTES = {
  ReluBackward0: "Passes the gradient on where relu's input was above 0, and sends 0 where it was 0 or below (at exactly 0 the gradient is 0).",
  ClampBackward1: "Passes the gradient on where the input was within the bounds, the bound itself included (clamp(min=0) at exactly 0 passes it, unlike relu), and sends 0 where the input was clipped.",
  AbsBackward0: "Multiplies the gradient by the sign of the input: −1 below 0, +1 above, and 0 at exactly 0.",
  MaxBackward1: "max() of the whole tensor: the gradient goes to the largest entry; entries that tie for the largest share it equally.",
  MinBackward1: "min() of the whole tensor: the gradient goes to the smallest entry; entries that tie for the smallest share it equally.",
  AmaxBackward0: "amax: the gradient goes to the largest entries, shared equally among entries that tie.",
  AminBackward0: "amin: the gradient goes to the smallest entries, shared equally among entries that tie.",
  MaxBackward0: "max along a dimension: each output's gradient goes to the one entry whose index max returned; an entry that tied but was not returned gets 0.",
  MinBackward0: "min along a dimension: each output's gradient goes to the one entry whose index min returned; an entry that tied but was not returned gets 0.",
  WhereBackward0: "Each position's gradient goes to the input where took there; the other input gets 0 at that position, and the condition gets no gradient. That 0 can still turn into NaN further back: where(x > 0, sqrt(x), 0) gives x a NaN gradient at x = 0 (0 × ∞ in sqrt's backward).",
  IndexBackward0: "Puts each gradient back at the position the index read; a position read more than once gets the sum.",
  GatherBackward0: "Sends each gradient back to the position it was gathered from; a position gathered more than once gets the sum.",
  SortBackward0: "Sends each sorted value's gradient back to the position that value came from.",
  TopkBackward0: "Sends each of the top values' gradient back to the position it came from; the entries not among the top get 0.",
  ToCopyBackward0: "A copy to another dtype or device (.to(), .float(), or autocast's cast into bfloat16 or float16): the gradient goes back in the input's dtype and device, rounded where that dtype is narrower, otherwise unchanged.",
  AccumulateGrad: "Adds the gradient that arrives to this leaf's .grad (or sets .grad, if it was None).",
};

// A leaf's AccumulateGrad adds nothing in two passes: torch.autograd.grad does not run it, and
// it drops what arrives once the leaf's requires_grad went off after the forward
export const LEAF_IN_AUTOGRAD_GRAD = "torch.autograd.grad does not run this leaf's AccumulateGrad: it returns the gradient that reaches the leaf, if the leaf is one of its inputs, and leaves .grad as it was.";
export const LEAF_DROPPED = "Its requires_grad was switched off after the forward: its AccumulateGrad drops the gradient that arrives, and .grad is left as it was.";

/** The sentence for a node in `event`'s pass, or null: by its backward's name (an
 *  AccumulateGrad: a leaf, said as the pass ran it). */
export function opNote(node, event = {}) {
  if (node.kind === "param" || node.kind === "leaf") {
    if (Array.isArray(event.inputs)) return LEAF_IN_AUTOGRAD_GRAD;
    if ((event.dropped || []).includes(node.param || node.label)) return LEAF_DROPPED;
    return OP_NOTES.AccumulateGrad;
  }
  return Object.hasOwn(OP_NOTES, node.name) ? OP_NOTES[node.name] : null;
}

/** A named tensor made by an operation is not a leaf: autograd keeps no .grad for it. */
export function nonLeafNote(label) {
  return `${label} is not a leaf: its gradient passes through this node on to the inputs, and ` +
    `${label}.grad stays None unless ${label}.retain_grad() was called before the backward.`;
}
