"""Where the top-level folders (templates/, static/, scenarios/) are.

In a source checkout (and an editable install) they sit beside the `app` package; a wheel
carries them inside it, under `app/_data/` (see pyproject.toml). Looking in both places keeps
one code path for both kinds of install.
"""

from pathlib import Path

_PACKAGE = Path(__file__).resolve().parent

__all__ = ["resource_dir"]


def resource_dir(name: str) -> Path:
    """Return the folder `name` ("templates", "static" or "scenarios")."""
    for candidate in (_PACKAGE / "_data" / name, _PACKAGE.parent / name):
        if candidate.is_dir():
            return candidate
    raise FileNotFoundError(
        f"autograd-lab cannot find its '{name}' folder (looked in {_PACKAGE / '_data'} and "
        f"{_PACKAGE.parent}); reinstall the package with `pip install .`"
    )
