// Predict-then-reveal questions, made from a Trace's backward event: what the class is asked
// is a fact the run recorded, so the revealed answer is the graph on the screen.
//   uses:  how many times is the most-used parameter used (how many contributions sum into
//          its .grad)?
//   grads: how many of the parameters receive a gradient from this backward?
//   first: which node does the backward pass run first?

const MAX_CHOICES = 12;

function usesOf(ev, name) {
  return ((ev.contributions || {})[name] || []).length;
}

function numberChoices(answer, low, high) {
  const top = Math.min(Math.max(high, answer + 1), low + MAX_CHOICES - 1);
  const choices = [];
  for (let n = low; n <= top; n += 1) choices.push(String(n));
  return { choices, answer: answer - low };
}

/** The questions this event can ask, each {key, prompt, choices, answer}. */
export function questionsFor(doc, ev) {
  if (!doc || !ev || ev.kind !== "backward") return [];
  const out = [];
  // torch.autograd.grad returns a gradient per input and fills no .grad: asked of its inputs
  const returns = Array.isArray(ev.inputs);
  const names = Object.keys(doc.params || {}).filter((n) => doc.params[n].kind !== "leaf" &&
    (!returns || ev.inputs.includes(n)));
  const dropped = new Set(ev.dropped || []); // requires_grad off after the forward: nothing added
  const inner = new Set(ev.inner || []); // filled by a backward torch ran inside this one
  const label = `backward #${ev.index}`;
  const counted = names.filter((n) => !dropped.has(n));
  if (counted.length) {
    const busiest = counted.reduce((a, b) => (usesOf(ev, b) > usesOf(ev, a) ? b : a));
    const uses = usesOf(ev, busiest);
    const into = returns ? "the gradient autograd.grad returns for it" : "its .grad";
    out.push({ key: "uses", prompt: `How many times is ${busiest} used in ${label}: how many contributions sum into ${into}?`,
      ...numberChoices(uses, 0, 4) });
  }
  if (names.length) {
    const receiving = names.filter((n) => !dropped.has(n) && (usesOf(ev, n) > 0 || inner.has(n))).length;
    const asked = returns ? `${names.length} inputs autograd.grad was asked for` :
      `model's ${names.length} parameters`;
    out.push({ key: "grads", prompt: `How many of the ${asked} receive a gradient from ${label}?`,
      ...numberChoices(receiving, 0, names.length) });
  }
  const order = ev.order || [];
  const nodes = new Map(ev.graph.nodes.map((n) => [n.id, n]));
  const first = nodes.get(order[0]);
  if (first) {
    // the first node against others that run later: distinct names, in a fixed order
    const names2 = [...new Set(order.map((id) => nodes.get(id)).filter(Boolean).map((n) => n.name))];
    const others = names2.filter((n) => n !== first.name).slice(-3);
    const choices = [...others, first.name].sort();
    if (choices.length >= 2) {
      out.push({ key: "first", prompt: `Which node does ${label} run first?`, choices,
        answer: choices.indexOf(first.name) });
    }
  }
  return out;
}
