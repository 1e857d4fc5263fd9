// Progress while a page waits for a run or a drawing: the graph area says what is happening and
// for how long, instead of freezing. It says nothing of how the server works (a stored run is
// only read back; a scenario may come from the cache or a worker).

export class Progress {
  constructor(box, text) {
    this.box = box;
    this.text = text;
    this.timer = null;
  }

  start(what) {
    const t0 = performance.now();
    this.stop();
    this.box.hidden = false;
    this.box.setAttribute("aria-busy", "true");
    const tick = () => {
      const secs = ((performance.now() - t0) / 1000).toFixed(1);
      this.text.textContent = `${what} — ${secs} s`;
    };
    tick();
    this.timer = setInterval(tick, 200);
  }

  /** A message of the caller's own (a run's place in line, its time against its limit). */
  show(message) {
    clearInterval(this.timer);
    this.timer = null;
    this.box.hidden = false;
    this.box.setAttribute("aria-busy", "true");
    this.text.textContent = message;
  }

  stop() {
    clearInterval(this.timer);
    this.timer = null;
    this.box.hidden = true;
    this.box.removeAttribute("aria-busy");
  }
}
