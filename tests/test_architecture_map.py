"""docs/ARCHITECTURE.md kept true where its claims are mechanical: every module under app/ is
named in its own package's section, every member of `app.state` is listed, and each threshold
the map names is the constant the code uses. (The map once said 1,000 where the code said 300,
and named every module of app/web in one cell of 1,301 words.)"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
MAP = (ROOT / "docs" / "ARCHITECTURE.md").read_text()


def _number(text: str) -> int:
    return int(text.replace(",", ""))


def sections() -> dict[str, str]:
    """Each package's section of the map by its folder (`## `app/web/runs/``), and the modules
    directly under app/ under "app"."""
    found: dict[str, str] = {}
    parts = re.split(r"^#{2,3} (.*)$", MAP, flags=re.M)
    for heading, body in zip(parts[1::2], parts[2::2], strict=True):
        folder = re.fullmatch(r"`(app(?:/[a-z_]+)*)/`.*", heading.strip())
        if folder:
            found[folder.group(1)] = body
        elif heading.strip() == "Beside the packages":
            found["app"] = body
    return found


def test_every_module_under_app_is_named_in_its_packages_section():
    by_folder = sections()
    assert {"app", "app/web", "app/web/runs", "app/runner/sandbox"} <= set(by_folder), (
        "the map's package headings are not found: the search is wrong")
    missing = sorted(
        str(p.relative_to(ROOT)) for p in (ROOT / "app").rglob("*.py")
        if p.name != "__init__.py" and "_data" not in p.parts
        and p.name not in by_folder.get(str(p.parent.relative_to(ROOT)), ""))
    assert not missing, f"docs/ARCHITECTURE.md does not name these in their package: {missing}"


def test_every_app_state_member_is_listed():
    used = set()
    for path in (ROOT / "app" / "web").rglob("*.py"):
        used |= set(re.findall(r"app\.state\.([a-z_]+)", path.read_text()))
    paragraph = MAP[MAP.index("State lives in `app.state`"):]
    paragraph = paragraph[:paragraph.index("\n\n")]
    listed = set(re.findall(r"`([a-z_]+)`", paragraph))
    assert used, "no app.state member found: the search is wrong"
    assert used <= listed, f"app.state members missing from the map: {sorted(used - listed)}"


def _constants():
    from app.render import draw, group
    from app.trace import recorder

    return [
        (r"edge labels dropped above ([\d,]+)", draw.COMPACT_ABOVE),
        (r"flat views up to ([\d,]+) nodes", draw.MAX_DRAWN_NODES),
        (r"the deepest depth under ([\d,]+) units", group.READABLE_NODES),
        (r"and ([\d,]+) edges between them", group.READABLE_EDGES),
        (r"stack only for the first ([\d,]+) nodes", recorder.ANOMALY_NODES),
    ]


@pytest.mark.parametrize("index", range(5))
def test_each_threshold_on_the_map_is_the_codes(index):
    pattern, constant = _constants()[index]
    found = re.findall(pattern, MAP)
    assert found, f"the map no longer says {pattern!r}: update this test with it"
    assert {_number(f) for f in found} == {constant}, (pattern, found, constant)
