"""Do two revisions of autograd-lab make the same Trace of every built-in scenario?

    .venv/bin/python scripts/compare_traces.py --against REV [--with REV2]

Checks a refactoring that must not change behaviour: each revision is exported with
`git archive` into a folder of its own, and a fresh interpreter of each traces every scenario of
*this* checkout (every variant, default options, on the CPU) in-process, unsandboxed. The two sets
of documents are compared as JSON, less the fields that differ from run to run (`elapsed`).
Without --with, the working tree is the second revision. Exit status 0 when all are equal.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tarfile
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

# run inside each revision's tree: the in-process tracer has had more than one home
_DRIVER = r"""
import json, sys
from pathlib import Path
try:
    from app.trace.tracer import trace_script
except ImportError:
    from app.trace.run import trace_script
jobs = json.loads(sys.argv[1])
out = {}
for key, (path, args) in jobs.items():
    out[key] = trace_script(Path(path), argv=args)
json.dump(out, open(sys.argv[2], "w"), sort_keys=True, allow_nan=False)
"""

_VOLATILE = ("elapsed",)


def _jobs(scenarios: Path) -> dict[str, tuple[str, list[str]]]:
    sys.path.insert(0, str(ROOT))
    from app.catalog import load_catalog

    jobs = {}
    for name, scenario in load_catalog(scenarios).items():
        for variant in scenario.variants or [None]:
            args = ["--variant", variant] if variant else []
            jobs[f"{name}:{variant or '-'}"] = (str(scenario.path), args)
    return jobs


def _tree(rev: str | None, into: Path) -> Path:
    if rev is None:
        return ROOT
    archive = subprocess.run(["git", "-C", str(ROOT), "archive", rev], check=True,
                             capture_output=True).stdout
    folder = into / rev.replace("/", "_")
    folder.mkdir()
    with tempfile.TemporaryFile() as f:
        f.write(archive)
        f.seek(0)
        with tarfile.open(fileobj=f) as tar:
            tar.extractall(folder, filter="data")
    return folder


def _traces(tree: Path, jobs: dict, out: Path) -> dict:
    subprocess.run([sys.executable, "-c", _DRIVER, json.dumps(jobs), str(out)], cwd=tree,
                   env={"PYTHONPATH": str(tree), "PATH": "/usr/bin:/bin",
                        "OMP_NUM_THREADS": "1", "PYTHONHASHSEED": "0"}, check=True)
    docs = json.loads(out.read_text())
    for doc in docs.values():
        for key in _VOLATILE:
            doc.pop(key, None)
    return docs


def _first_difference(a, b, path="") -> str:
    if type(a) is not type(b):
        return f"{path or '/'}: {type(a).__name__} vs {type(b).__name__}"
    if isinstance(a, dict):
        for key in sorted(set(a) | set(b)):
            if key not in a or key not in b:
                return f"{path}/{key}: only in {'the second' if key not in a else 'the first'}"
            if a[key] != b[key]:
                return _first_difference(a[key], b[key], f"{path}/{key}")
    if isinstance(a, list):
        if len(a) != len(b):
            return f"{path}: {len(a)} vs {len(b)} items"
        for i, (x, y) in enumerate(zip(a, b, strict=True)):
            if x != y:
                return _first_difference(x, y, f"{path}/{i}")
    return f"{path}: {a!r:.80} vs {b!r:.80}"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--against", required=True, help="the revision to compare with")
    parser.add_argument("--with", dest="other", help="the second revision (default: work tree)")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        scenarios = tmp / "scenarios"  # one copy, one path: both trees trace the same files
        scenarios.mkdir()
        for path in (ROOT / "scenarios").glob("*.py"):
            (scenarios / path.name).write_bytes(path.read_bytes())
        jobs = _jobs(scenarios)
        first = _traces(_tree(args.against, tmp), jobs, tmp / "first.json")
        second = _traces(_tree(args.other, tmp), jobs, tmp / "second.json")
    differ = 0
    for key in jobs:
        same = first[key] == second[key]
        differ += not same
        print(f"{'same' if same else 'DIFFERENT':9}  {key}" +
              ("" if same else f"  ({_first_difference(first[key], second[key])})"))
    print(f"{len(jobs) - differ} of {len(jobs)} traces are the same JSON")
    return 1 if differ else 0


if __name__ == "__main__":
    sys.exit(main())
