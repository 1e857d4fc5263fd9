// Touch for the graph on phones and tablets: one finger pans, two fingers pinch-zoom about
// their midpoint, a tap picks the node under it. svg-pan-zoom's own touch handling pans with
// one finger only and swallows taps (it cancels touchstart), so it is replaced here through the
// library's customEventsHandler hook.

const TAP_MOVE = 10; // px a finger may drift and still count as a tap
const TAP_TIME = 500; // ms

const distance = (a, b) => Math.hypot(a.clientX - b.clientX, a.clientY - b.clientY);
const middle = (a, b) => ({ x: (a.clientX + b.clientX) / 2, y: (a.clientY + b.clientY) / 2 });

/** A customEventsHandler for svgPanZoom; `onTap(element)` gets the element under a tap. */
export function touchGestures({ onTap }) {
  let listeners = null;
  return {
    haltEventListeners: ["touchstart", "touchend", "touchmove", "touchleave", "touchcancel"],
    init({ svgElement, instance }) {
      let last = null; // the one finger's last position (panning)
      let pinch = null; // {dist, mid} of the two fingers at the last move
      let tap = null; // where and when a possible tap began
      const local = (p) => {
        const box = svgElement.getBoundingClientRect();
        return { x: p.x - box.left, y: p.y - box.top };
      };
      const begin = (touches) => {
        if (touches.length === 1) {
          last = { x: touches[0].clientX, y: touches[0].clientY };
          pinch = null;
        } else if (touches.length >= 2) {
          pinch = { dist: distance(touches[0], touches[1]), mid: middle(touches[0], touches[1]) };
          last = null;
        } else {
          last = pinch = null;
        }
      };
      listeners = {
        touchstart: (e) => {
          e.preventDefault(); // no page scroll or browser zoom while the finger is on the graph
          tap = e.touches.length === 1 ?
            { x: e.touches[0].clientX, y: e.touches[0].clientY, t: e.timeStamp } : null;
          begin(e.touches);
        },
        touchmove: (e) => {
          e.preventDefault();
          const t = e.touches;
          if (tap && t.length === 1 && Math.hypot(t[0].clientX - tap.x, t[0].clientY - tap.y) > TAP_MOVE) tap = null;
          if (t.length === 1 && last) {
            instance.panBy({ x: t[0].clientX - last.x, y: t[0].clientY - last.y });
            last = { x: t[0].clientX, y: t[0].clientY };
          } else if (t.length >= 2 && pinch) {
            const dist = distance(t[0], t[1]);
            const mid = middle(t[0], t[1]);
            if (pinch.dist > 0 && dist > 0) instance.zoomAtPointBy(dist / pinch.dist, local(mid));
            instance.panBy({ x: mid.x - pinch.mid.x, y: mid.y - pinch.mid.y });
            pinch = { dist, mid };
          }
        },
        touchend: (e) => {
          e.preventDefault();
          if (tap && e.touches.length === 0 && e.timeStamp - tap.t < TAP_TIME) {
            const target = document.elementFromPoint(tap.x, tap.y);
            if (target) onTap(target);
          }
          tap = null;
          begin(e.touches); // lifting one of two fingers goes back to panning with the other
        },
        touchcancel: () => { tap = null; last = pinch = null; },
      };
      for (const [type, fn] of Object.entries(listeners)) {
        svgElement.addEventListener(type, fn, { passive: false });
      }
    },
    destroy({ svgElement }) {
      for (const [type, fn] of Object.entries(listeners || {})) svgElement.removeEventListener(type, fn);
      listeners = null;
    },
  };
}
