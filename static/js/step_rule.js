// What an optimizer step did to one parameter, said by that optimizer's own rule: its settings
// as the step had them, and the check the tracer made (app/trace/optimizer_rules.py): the rule
// recomputed from copies taken before the step, against the change PyTorch made. Every sentence
// here is about recorded facts; where nothing was recorded, it says so.

import { fmt, num } from "./dom.js";

// settings that change no number of the update: left out of the list
const PLUMBING = new Set(["foreach", "fused", "differentiable", "capturable", "initial_lr"]);

/** The group's settings as "lr = 0.1, momentum = 0.9", its defaults that change nothing left out. */
export function settingsText(settings) {
  if (!settings) return "";
  return Object.entries(settings)
    .filter(([k, v]) => !PLUMBING.has(k) && v !== null && v !== false &&
      !(v === 0 && k !== "lr"))
    .map(([k, v]) => `${k} = ${Array.isArray(v) ? `(${v.map((x) => fmt(x)).join(", ")})` : (v === true ? "on" : fmt(v))}`)
    .join(", ");
}

/** The sentences that say how this step moves a weight: [lead, ...details], and, where a
 *  GradScaler ran the step, what it did to the gradient first (app/trace/grad_scaler.py). */
export function ruleSentences(event, change) {
  const said = optimizerSentences(event, change);
  if (event.scaler && typeof event.scaler.scale === "number") {
    // after the script's own scaler.unscale_ (to clip, say), scaler.step divides nothing
    const scale = fmt(event.scaler.scale);
    said.push(event.scaler.unscaled_first ?
      `A GradScaler ran this step: the script's scaler.unscale_ had already divided each .grad ` +
      `by its scale (${scale}), so scaler.step did not divide again; it found them finite and ` +
      `called ${event.optimizer}.step() on .grad as the script left it (clipped, if it clipped ` +
      "after unscale_)." :
      `A GradScaler ran this step: scaler.step divided each .grad by its scale (${scale}), found ` +
      `them finite, and then called ${event.optimizer}.step(), so the update used .grad ÷ ` +
      `${scale} (the gradient of the unscaled loss, where the loss was scaled with scaler.scale).`);
  }
  return said;
}

function optimizerSentences(event, change) {
  const settings = (event.settings || [])[change.group ?? 0];
  const name = event.optimizer;
  if (!settings) {
    return [`${name} step #${event.index}: this run was recorded before steps kept their ` +
      "optimizer's settings, so only the change it made is shown."];
  }
  const lr = settings.lr;
  const state = change.state || {};
  const wd = num(settings.weight_decay) || 0;
  const up = settings.maximize ? " (maximize: up the gradient, not down)" : "";
  if (name === "SGD") {
    const m = num(settings.momentum) || 0;
    // Nesterov's step is not −lr × the buffer: the lead sentence says the one it takes
    const lead = !m ? "its gradient" : (settings.nesterov ?
      `(its gradient + ${fmt(m)} × its momentum buffer)` : "its momentum buffer");
    const out = [`SGD step #${event.index}: each weight moves by −lr × ${lead} (lr = ${fmt(lr)})${up}.`];
    if (wd) {
      // maximize negates the gradient before the decay is added: the decay still shrinks
      out.push(`Weight decay adds ${fmt(wd)} × the weight to the gradient first` +
        (settings.maximize ? " (to the negated gradient: maximize flips only the gradient, so " +
          "the decay still shrinks the weight)" : "") + ", so a weight moves even where its .grad is 0.");
    }
    if (m) {
      const d = num(settings.dampening) || 0;
      out.push(state.momentum_buffer ?
        `The buffer is ${fmt(m)} × the buffer of the last step + ${fmt(1 - d)} × the gradient.` :
        "This is the buffer's first step: it starts as the gradient itself.");
      if (settings.nesterov) out.push("Nesterov: the buffer in that sum is the new one, updated first.");
    }
    return out;
  }
  if (name === "Adam" || name === "AdamW") {
    const [b1, b2] = settings.betas || [];
    const first = !state.step;
    // −lr, not lr: a step goes down the gradient; and both means are divided by 1 − beta^step
    // (they start at 0): without that a first step would be 0.1 / √0.001 ≈ 3.2 × lr with the
    // default betas, not lr
    const out = [`${name} step #${event.index}: each weight moves by −lr × the running mean of its ` +
      "gradient ÷ (the root of the running mean of its square + eps), each mean first divided by " +
      "1 − its beta^step (both start at 0), so the size of a step does not follow the gradient's " +
      `scale (lr = ${fmt(lr)}, betas = (${fmt(b1)}, ${fmt(b2)}), eps = ${fmt(settings.eps)})${up}.`];
    if (first && !wd) {
      out.push("On this first step each weight whose gradient is well above eps moves by about lr itself.");
    }
    if (wd) {
      out.push(name === "AdamW" || settings.decoupled_weight_decay ?
        `Weight decay (decoupled) first shrinks each weight by lr × ${fmt(wd)} × the weight.` :
        `Weight decay adds ${fmt(wd)} × the weight to the gradient before the running means` +
        (settings.maximize ? " (to the negated gradient: maximize flips only the gradient, so " +
          "the decay still pulls the weight toward 0)." : "."));
    }
    if (settings.amsgrad) out.push("AMSGrad divides by the largest running mean square seen so far.");
    return out;
  }
  return [`${name} step #${event.index}: autograd-lab does not explain ${name}'s rule; below is ` +
    "the change the step made, with its settings."];
}

/** The check's line: [mark, sentence], or null where the rule is not one the tracer checks. */
export function checkSentence(event, change) {
  const check = change.check;
  if (!event.settings || !["SGD", "Adam", "AdamW"].includes(event.optimizer)) return null;
  if (!check) return ["", "Not checked: this run was recorded before steps were checked."];
  if (check.unchecked === "no_grad") return ["", `Not checked: it had no .grad, so ${check.rule} skipped it.`];
  if (check.unchecked === "too_large") return ["", "Not checked: the model is too large to copy before every step."];
  if (check.unchecked === "closure") return ["", "Not checked: the step was given a closure, which computes .grad again inside the step."];
  if (check.unchecked) {
    return ["", `Not checked: ${check.rule}'s rule cannot be applied to these settings (a learning ` +
      "rate or another setting that is not a number, for example)."];
  }
  if (check.matches) {
    return ["✓", `Recomputed by ${check.rule}'s rule from the weights, gradient and state before ` +
      `the step: it is the change PyTorch made (largest difference ${fmt(check.largest_difference, 2)}).`];
  }
  return ["✗", `The change PyTorch made is not ${check.rule}'s rule applied to the recorded gradient: ` +
    `they differ by up to ${fmt(check.largest_difference, 3)}. Something besides the rule changed ` +
    "the weights during the step (a step hook, for example); autograd-lab does not know what."];
}

/** ‖change‖ / ‖.grad‖ where it means something: plain SGD, and a gradient that is not 0. */
export function plainRatio(event, change, changeNorm) {
  const settings = (event.settings || [])[change.group ?? 0];
  if (event.optimizer !== "SGD" || !settings || !change.grad) return null;
  if (num(settings.momentum) || num(settings.weight_decay) || settings.maximize) return null;
  const gradNorm = num(change.grad.norm);
  if (!(gradNorm > 0) || !Number.isFinite(changeNorm)) return null;
  return changeNorm / gradNorm;
}
