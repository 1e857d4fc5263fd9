"""axe-core, vendored (vendor/axe-core-VERSION/README.md), run on a page in the browser.

The pages' policy (`script-src 'self'`) refuses an injected script, so the page under audit is
opened in a context made with `bypass_csp=True` (Playwright: the page's own policy is not
enforced there): that changes nothing else of what the page loads or draws.
"""

from __future__ import annotations

from pathlib import Path

AXE = Path(__file__).resolve().parent / "vendor" / "axe-core-4.14.1" / "axe.min.js"
BAD = ("serious", "critical")


def audit(page) -> list[dict]:
    """Every violation axe finds on the page as it is now: {id, impact, help, targets}."""
    if not page.evaluate("() => typeof window.axe === 'object'"):
        page.add_script_tag(path=str(AXE))
    found = page.evaluate("""async () => {
      const result = await axe.run(document, { resultTypes: ["violations"] });
      return result.violations.map((v) => ({ id: v.id, impact: v.impact, help: v.help,
        targets: v.nodes.map((n) => n.target.join(" ")) }));
    }""")
    return found


def serious(violations: list[dict]) -> list[dict]:
    return [v for v in violations if v["impact"] in BAD]


def said(violations: list[dict]) -> str:
    """The violations as a test's message: each rule, its impact, and where (first 8 places)."""
    return "\n".join(f"{v['id']} ({v['impact']}, {len(v['targets'])}×): {v['help']}: "
                     + ", ".join(v["targets"][:8]) for v in violations)
