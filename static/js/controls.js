// The run settings (variant, options, device) and the export links. Changing a setting asks for
// a new run; the exports always point at the API with the current settings, so what downloads
// is what the page shows.

import { fetchDevices } from "./api.js";
import { h } from "./dom.js";

export class Controls {
  constructor(form, scenario, { onChange }) {
    this.form = form;
    this.scenario = scenario;
    this.device = form.querySelector("#device-select");
    form.addEventListener("change", () => onChange(this.read()));
    // Enter in an option's field must not submit the form (a page load): changes apply at once
    form.addEventListener("submit", (event) => event.preventDefault());
  }

  /** Show a run's settings in the form. */
  set(run) {
    for (const input of this.form.querySelectorAll("input[name=variant]")) input.checked = input.value === run.variant;
    for (const el of this.form.querySelectorAll("[data-option]")) {
      const value = run.options[el.dataset.option];
      if (el.tagName === "SELECT" && ![...el.options].some((o) => o.value === value)) {
        el.append(h("option", { value }, `${value} (not a choice)`));
      }
      el.value = value;
    }
    this.ensureDevice(run.device);
    this.device.value = run.device;
  }

  read() {
    const variant = this.form.querySelector("input[name=variant]:checked");
    const options = {};
    for (const el of this.form.querySelectorAll("[data-option]")) options[el.dataset.option] = el.value;
    return { variant: variant ? variant.value : null, device: this.device.value, options };
  }

  /** Offer the devices the worker reports; keep a requested one that is missing, marked as such. */
  async loadDevices() {
    try {
      const { devices } = await fetchDevices();
      const wanted = this.device.value;
      this.device.replaceChildren(...devices.map((d) => h("option", { value: d }, d)));
      this.ensureDevice(wanted);
      this.device.value = wanted;
      return devices;
    } catch (err) {
      this.device.title = `could not list devices: ${err.message}`;
      return null;
    }
  }

  ensureDevice(name) {
    if (![...this.device.options].some((o) => o.value === name)) {
      this.device.append(h("option", { value: name }, `${name} (not available here)`));
    }
  }
}

/** Point the export links at the current run and event (`subject`: see api.js). */
export function updateExports(subject, run, eventIndex, haveTrace = true, drawing = {}) {
  const tag = [subject.name, run.variant, ...Object.entries(run.options).map(([k, v]) => `${k}${v}`),
    run.device !== "cpu" ? run.device.replace(":", "") : null].filter(Boolean).join("-");
  const set = (id, href, file) => {
    const a = document.getElementById(id);
    if (href) {
      a.href = href;
      a.download = file;
      a.removeAttribute("aria-disabled");
    } else {
      a.removeAttribute("href");
      a.setAttribute("aria-disabled", "true");
    }
  };
  const ev = eventIndex === null ? null : eventIndex;
  const suffix = ev === null ? "" : `-event${ev}`;
  for (const fmt of ["svg", "png", "dot"]) {
    // the drawing as shown: a big graph's modules, as grouped and opened on the page
    set(`export-${fmt}`, ev === null ? null : subject.graphUrl(run, ev, fmt, drawing), `${tag}${suffix}.${fmt}`);
  }
  set("export-json", haveTrace ? subject.traceUrl(run) : null, `${tag}.trace.json`);
}
