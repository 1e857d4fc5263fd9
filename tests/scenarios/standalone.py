"""Run scenario scripts the way `python scenarios/NAME.py ARGS` does, many of them quickly.

Started with the test's own interpreter as `python tests/scenarios/standalone.py`, with a JSON
list of [script path, [args...]] on stdin. It imports torch once (two seconds, most of a small
scenario's run time), then runs each script in a forked child of its own: a fresh process, the
script as `__main__`, its folder first on `sys.path`, its own `sys.argv`, nothing traced. It
prints a JSON list of {"returncode", "stdout", "stderr"}, one per script.
"""

import json
import os
import runpy
import sys
import tempfile
import traceback

import torch  # noqa: F401 - imported once here, inherited by every child


def run_child(path: str, args: list[str]) -> None:
    sys.argv = [path, *args]
    sys.path.insert(0, os.path.dirname(path))
    code = 0
    try:
        runpy.run_path(path, run_name="__main__")
    except SystemExit as exc:
        code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
    except BaseException:  # noqa: BLE001 - what `python script.py` would print, and exit 1
        traceback.print_exc()
        code = 1
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


def main() -> None:
    results = []
    for path, args in json.load(sys.stdin):
        with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
            sys.stdout.flush()
            sys.stderr.flush()
            pid = os.fork()
            if pid == 0:
                os.dup2(out.fileno(), 1)
                os.dup2(err.fileno(), 2)
                run_child(path, args)
            _, status = os.waitpid(pid, 0)
            out.seek(0)
            err.seek(0)
            results.append({"returncode": os.waitstatus_to_exitcode(status),
                            "stdout": out.read().decode(errors="replace"),
                            "stderr": err.read().decode(errors="replace")})
    json.dump(results, sys.stdout)


if __name__ == "__main__":
    main()
