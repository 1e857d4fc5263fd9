"""The page's own files (static/) under a name that changes with their content, cached for good.

A run's page imports some 25 ES modules by relative path. Served plain, each is asked again on
every page (If-None-Match, 304) and found one import level at a time: on the 48-layer encoder's
first picture that was 80 ms of the page's 190, while the server was still busy with the run.
Under `/static/v/<hash of the files>/` each file never changes, so a browser keeps it without
asking (`immutable`) and a new release is a new address. The modules' relative imports inherit
the versioned folder; `url_for('static', ...)` in the templates gives it.

The plain `/static/` stays, revalidated as before, for addresses written down elsewhere.
"""

from __future__ import annotations

import hashlib
from pathlib import Path

from fastapi.staticfiles import StaticFiles
from starlette.responses import Response

__all__ = ["ForeverStaticFiles", "content_version"]


def content_version(folder: Path) -> str:
    """A short hash of every file's path and bytes under `folder`: the same files, the same
    name, whichever machine or install serves them."""
    digest = hashlib.sha256()
    for path in sorted(p for p in folder.rglob("*") if p.is_file()):
        digest.update(path.relative_to(folder).as_posix().encode() + b"\0")
        digest.update(path.read_bytes())
    return digest.hexdigest()[:12]


class ForeverStaticFiles(StaticFiles):
    """StaticFiles whose answers may be kept a year and never asked for again."""

    def file_response(self, *args, **kwargs) -> Response:
        response = super().file_response(*args, **kwargs)
        response.headers["Cache-Control"] = "public, max-age=31536000, immutable"
        return response
