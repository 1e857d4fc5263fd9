"""The child process the runner starts: trace one script, write the Trace document to a file.

    python -m app.runner.worker --serve RUN_DIR [--sandbox JSON]      (what the runner uses)
    python -m app.runner.worker --script PATH --out OUT.json [--device D] [--name N] [-- ARGS]

`--serve` is one run in three steps: import torch and the tracer, confine itself (Landlock:
read-only interpreter, the run folder the only writable place, no exec, no TCP) and print a
READY line; wait for the job as one JSON line on stdin (the runner has put the script in
RUN_DIR by then); set the job's rlimits, trace, write RUN_DIR/trace.json, exit. A pre-started
worker of the pool is one waiting at the second step. The `--script` form runs directly,
unconfined, for debugging.

The protocol (READY line, job, result file, environment) is `protocol.py`'s. The document is
written to a temporary name and renamed, so the runner never reads half a file. A SIGTERM (the
runner's wall-clock limit) interrupts the script where it is; the document then says which line
it had reached. After the script has ended the limit is no longer the script's: it only cuts
short autograd-lab's own drawing (app/trace/after_work.py), and the report is still written.

This is the runner's child side, and the one module of the runner that calls the tracer (and so
torch): the import contracts in `.importlinter` allow exactly these imports.
"""

from __future__ import annotations

import argparse
import faulthandler
import gc
import importlib
import io
import json
import mmap
import os
import signal
import sys
import time
from pathlib import Path

from .protocol import (
    MAX_JOB_LINE,
    PARTIAL_FILE,
    RESULT_FILE,
    THREAD_VARS,
    TIME_LIMIT_MESSAGE,
    Job,
    ready_line,
)

_script_ended = False  # set the moment the script ends: a SIGTERM after it is no longer its


def _on_term(signum, frame):
    """The run's wall-clock limit. While the script runs, it stops the script (a Timeout at
    the line it had reached). Once it has ended, the limit is no longer the script's: it cuts
    short autograd-lab's own drawing after it, if that is running (after_work.py), and
    otherwise lets the report be written within the supervisor's grace."""
    if _script_ended:
        from app.trace.after_work import TIME_LIMIT, interrupt

        interrupt(TIME_LIMIT)
        return
    from app.trace.as_main import TimeLimitExceeded

    raise TimeLimitExceeded(TIME_LIMIT_MESSAGE)


REPORT_MARGIN = 256 * 1024  # below the bound: the supervisor adds the sandbox's report


def _dump(doc: dict, path: Path, text: bytes | None = None) -> None:
    # the whole text at once (json_text.py), not json.dump: dump writes piece by piece through
    # json's pure-Python encoder, 3 times slower; the text is bounded anyway
    if text is None:
        from app.format.shrink import report_text  # loaded by prepare(), before the sandbox

        text = report_text(doc, fast=False)
    with open(path, "wb") as f:
        f.write(text)


def _write_document(doc: dict, out: Path, keep: Path | None = None,
                    text: bytes | None = None) -> None:
    """`text`: `doc` already encoded (the worker measured it against the report bound)."""
    tmp = out.with_name(PARTIAL_FILE if out.name == RESULT_FILE else out.name + ".partial")
    try:
        _dump(doc, tmp, text)
    except OSError:
        # the script filled its folder (ENOSPC): what it left is of no use any more
        if keep is not None:
            _clear_folder(out.parent, keep={keep.name})
        try:
            _dump(doc, tmp)
        except OSError as exc:  # EFBIG: the document outgrew the run's file-size limit
            from app.format import error_record

            for key in ("events", "params", "diagnostics"):
                doc[key] = [] if key != "params" else {}
            doc["stdout"], doc["stderr"] = doc["stdout"][:4096], doc["stderr"][:4096]
            if not doc.get("error"):
                doc["error"] = error_record(
                    "TraceTooLarge", f"The trace of this script is too large to keep "
                    f"({exc.strerror}). Make the model or the number of backward passes smaller.")
            _dump(doc, tmp)
    os.replace(tmp, out)


# address space kept back from the script for what comes after it (its report): a script that
# fills its limit (a million-node graph) otherwise left none, and the worker died writing it
REPORT_ROOM = 96 << 20


def _keep_back(size: int):
    """An untouched anonymous mapping of `size` bytes: under RLIMIT_AS it counts as used, so
    the script has that much less, and closing it gives it back; no memory is touched."""
    try:  # (anonymous: fileno -1; MAP_NORESERVE where this Python names it, 3.13 on)
        return mmap.mmap(-1, size, flags=mmap.MAP_PRIVATE | getattr(mmap, "MAP_NORESERVE", 0))
    except (OSError, ValueError):
        return None  # no room even for this: the script's own MemoryError will say so


# what a graph's node or edge may take as JSON, at most (names and labels are clipped), and
# what the rest of a report may: an estimate from above of the report's text
NODE_TEXT = 2048
REST_TEXT = 64 << 20


def _out_of_memory(doc: dict) -> dict:
    from app.format import error_record, new_document

    script = doc.get("script") or {}
    small = new_document(script.get("name", "script.py"), script.get("source", ""),
                         doc.get("device", "cpu"), doc.get("torch"))
    small["stdout"], small["stderr"] = (doc.get("stdout") or "")[-4096:], \
        (doc.get("stderr") or "")[-4096:]
    small["error"] = doc.get("error") or error_record(
        "MemoryError", "the run's report did not fit in the memory the script left")
    return small


def _room_for_orjson(doc: dict) -> bool:
    """Is there address space left for orjson to write `doc`? An allocation its writer cannot
    make under RLIMIT_AS kills the worker (SIGSEGV, json_text.py), and the script decides how
    much room is left: a million-node graph took nearly all of its 2 GiB, and the report was
    lost. Three times an estimate from above of the text (the writer's buffer doubles as it
    grows), or json's encoder, which raises MemoryError instead."""
    import resource

    from .sandbox.rlimits import address_space_in_use

    limit = resource.getrlimit(resource.RLIMIT_AS)[0]
    if limit == resource.RLIM_INFINITY:
        return True
    graphs = [e.get("graph") for e in doc.get("events") or () if isinstance(e, dict)] + \
        [v.get("graph") for v in doc.get("views") or () if isinstance(v, dict)]
    parts = sum(len(g.get("nodes") or ()) + len(g.get("edges") or ())
                for g in graphs if isinstance(g, dict))
    text = parts * NODE_TEXT + REST_TEXT + len(doc.get("stdout") or "") * 6 + \
        len(doc.get("stderr") or "") * 6
    try:
        return limit - address_space_in_use() > 3 * text
    except OSError:
        return False


def _clear_folder(folder: Path, keep: set[str]) -> None:
    import shutil

    for entry in folder.iterdir():
        if entry.name in keep:
            continue
        if entry.is_dir() and not entry.is_symlink():
            shutil.rmtree(entry, ignore_errors=True)
        else:
            entry.unlink(missing_ok=True)


def _normal_thread_stacks() -> None:
    """The launcher gives the main thread a 1 GiB stack limit (freeing deep graphs recurses);
    glibc would give every new thread that much too, and a script's few threads would eat its
    memory budget. New threads get the usual 8 MiB."""
    import ctypes
    import threading

    threading.stack_size(8 << 20)
    try:
        libc = ctypes.CDLL(None)
        attr = ctypes.create_string_buffer(256)  # a pthread_attr_t, with room to spare
        if libc.pthread_attr_init(attr) == 0:
            libc.pthread_attr_setstacksize(attr, ctypes.c_size_t(8 << 20))
            libc.pthread_setattr_default_np(attr)
            libc.pthread_attr_destroy(attr)
    except (OSError, AttributeError):
        pass  # not glibc: its own default applies


def prepare(plotting: bool = True, warm_up: bool = True) -> None:
    """Everything the script may use is loaded before the doors close (a fork server calls
    this once, before it forks any run). `plotting=False`: not matplotlib, for a fresh worker
    whose script does not import it; `warm_up=False`: no optimizer step first, for one whose
    script names no optimizer (preload.py)."""
    _normal_thread_stacks()
    for var in THREAD_VARS:
        os.environ.setdefault(var, "1")
    import inspect  # noqa: F401 - the recorder reads custom Function sources with it
    import linecache  # noqa: F401
    import traceback  # noqa: F401

    import numpy  # noqa: F401
    import torch

    _plotting(matplotlib=plotting)

    torch.set_num_threads(1)
    try:
        torch.set_num_interop_threads(1)
    except RuntimeError:
        pass  # already fixed by an earlier parallel call: nothing ran here yet, but be safe
    import torch.autograd.gradcheck  # noqa: F401 - custom_check uses it after the script

    from app.format import shrink  # noqa: F401 - used after the script: the app is shut by then
    from app.trace import tracer  # noqa: F401 - the tracer and everything it imports
    # a notebook written for the Jupyter extension imports it: the sandbox's own stand-in,
    # never the real package (which fetches runs over the network)
    sys.modules["autograd_lab"] = importlib.import_module("app.trace.sandbox_autograd_lab")

    if warm_up:
        _warm_up(torch)
    from .sandbox import seccomp

    seccomp.preload()
    # what is loaded by now (torch, numpy, the tracer: over a million objects) lives as long
    # as the run. Left in the collector's generations, every full collection during the
    # script walks all of it, and in a forked run touches, so copies, the pages it sits on:
    # the 48-layer encoder traced in 0.6 s instead of 0.34 (no collect first: 0.12 s more
    # for each exec'd run, to free a little)
    gc.freeze()


def _plotting(matplotlib: bool = True) -> None:
    """What tutorial scripts import besides torch: matplotlib (drawing to PNG, never a
    window), tqdm and torchviz. matplotlib gets only its own bundled fonts: the system's are
    outside what Landlock lets the script read, and a figure drawn with one would fail.
    Without matplotlib, torchviz is left out too (0.13 s, most of it distutils): a script
    that imports it anyway does so inside the sandbox, and the tracer patches its make_dot
    then (app/trace/on_import.py)."""
    if matplotlib:
        _matplotlib()
    for module in ("tqdm", "torchviz") if matplotlib else ("tqdm",):
        try:
            importlib.import_module(module)
        except ImportError:
            pass


def _matplotlib() -> None:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
        from matplotlib import font_manager

        data = matplotlib.get_data_path()
        manager = font_manager.fontManager
        manager.ttflist = [f for f in manager.ttflist if f.fname.startswith(data)]
        manager.afmlist = [f for f in manager.afmlist if f.fname.startswith(data)]
        figure = plt.figure(figsize=(1, 1))  # the first drawing loads Agg and a font: now
        plt.plot([0, 1])
        figure.savefig(io.BytesIO(), format="png")
        plt.close(figure)
    except ImportError:
        pass


def fresh_seeds() -> None:
    """Random seeds of the run's own, as a freshly started interpreter has: a fork server's
    children would otherwise all draw the same numbers (fork_server_process.py calls this)."""
    import random

    import numpy
    import torch

    random.seed()
    numpy.random.seed()
    torch.seed()
    if "matplotlib" in sys.modules:  # its folders are the run's, not the fork server's
        import matplotlib

        folder = os.environ.get("MPLCONFIGDIR") or os.getcwd()
        matplotlib.get_configdir = matplotlib.get_cachedir = lambda: folder


def _warm_up(torch) -> None:
    """One optimizer step of each common kind on a throwaway parameter: the first step imports
    torch._dynamo, sympy and ~800 other modules (about 2 s), which would otherwise land in the
    user's run, after the sandbox closed. Zeros only: the script's random stream is untouched."""
    p = torch.nn.Parameter(torch.zeros(2))
    for opt in (torch.optim.SGD([p], lr=0.1, momentum=0.9), torch.optim.Adam([p]),
                torch.optim.AdamW([p])):
        (p * p).sum().backward()
        opt.step()
        opt.zero_grad()


def serve(run_dir: Path, sandbox: dict, prepared: bool = False) -> int:
    """One run: import (unless a fork server did: `prepared`), confine, READY, the job."""
    main_pid = os.getpid()
    signal.signal(signal.SIGTERM, _on_term)
    # a crash in native code (a segfault through ctypes) still names the script's line
    faulthandler.enable(all_threads=False)
    # and so does the time limit: the stack is written to stderr the moment SIGTERM comes,
    # even inside a long native call (a backward through a million nodes), before the handler
    # above raises; if the report is not written within the grace period (a busy machine),
    # the supervisor still finds the line there (explain.py)
    faulthandler.register(signal.SIGTERM, all_threads=False, chain=True)
    # a write past the file-size limit fails with EFBIG instead of killing the worker
    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
    # a fresh worker for a script that never imports matplotlib leaves it out (preload.py)
    plotting = prepared or sandbox.get("plotting", True) is not False
    if not prepared:
        prepare(plotting=plotting, warm_up=sandbox.get("warm_up", True) is not False)
    from app.trace.recorder import RecordingLimits
    from app.trace.tracer import trace_script

    from .protocol import app_root
    from .sandbox.confine import apply_landlock, apply_seccomp, drop_stdin
    from .sandbox.rlimits import ResourceLimits, apply_job

    status: dict = {"pid": main_pid, "uid": os.getuid(), "gid": os.getgid()}
    if sandbox.get("seccomp"):
        status["seccomp"] = apply_seccomp()
    if sandbox.get("landlock", True):
        status["landlock"] = apply_landlock(run_dir, app_root() / "app",
                                            private_shm=bool(sandbox.get("shm")),
                                            own_root=bool(sandbox.get("own_root")))
    else:
        status["landlock"] = {"enforced": False, "reason": "turned off"}
    print(ready_line(status), flush=True)

    line = sys.stdin.buffer.readline(MAX_JOB_LINE)
    if not line.strip():
        return 0  # the pool is shutting down: no job will come
    job = Job.from_line(line)
    run_limits = ResourceLimits.from_json(sandbox.get("limits", {}))
    # prepare() set one: this run has the machine. Never more than the cores, nor than half
    # the run's process cap (threads count there: a 64-core server would fail to start them)
    threads = min(job.threads if isinstance(job.threads, int) else 1, os.cpu_count() or 1,
                  max(1, run_limits.processes // 2))
    if threads > 1:
        import torch

        torch.set_num_threads(threads)
    drop_stdin()
    # mapped before the job's limit is set from what is mapped: the script's budget is whole
    reserve = _keep_back(REPORT_ROOM)
    apply_job(run_limits, float(job.timeout), address_space=not job.device.startswith("cuda"))
    limits = RecordingLimits(max_backward_events=job.max_events,
                             max_step_events=job.max_events, watch_whole_run=job.watch_all is True)
    script_module: list = []  # never freed: this process ends with os._exit (tracer.py)
    # the supervisor's clock started as it wrote the job line: the limit falls at the latest
    # here (after_work.py keeps its last seconds for the report)
    deadline = time.monotonic() + float(job.timeout)

    def script_ended() -> None:
        global _script_ended
        _script_ended = True
        if reserve:
            reserve.close()

    doc = trace_script(run_dir / job.script, name=job.name, argv=job.args, device=job.device,
                       limits=limits, after_script=script_ended, keep=script_module,
                       deadline=deadline, load_matplotlib=plotting)
    # a SIGTERM from here on is ignored (_on_term): the report is finished and written within
    # the supervisor's grace rather than lost; its SIGKILL stays the backstop
    if os.getpid() != main_pid:
        os._exit(0)  # a child the script forked finished the script too: only we report
    # past what the supervisor reads back (or may be written), smaller rather than refused
    from app.format.shrink import report_text, shrink_to

    bounds = ResourceLimits.from_json(sandbox.get("limits", {}))
    bound = min(bounds.report_mb, bounds.file_size_mb) << 20
    try:
        fast = _room_for_orjson(doc)
        text = report_text(doc, fast)  # measured and written: one encoding when it fits
        if len(text) > bound - REPORT_MARGIN:
            doc = shrink_to(doc, bound - REPORT_MARGIN, bound, size=len(text))
            text = report_text(doc, fast)
    except MemoryError:
        # what the script left (threads of its own may still take memory) could not hold the
        # report: a small one that says so, rather than none
        doc = _out_of_memory(doc)
        text = report_text(doc, fast=False)
    _write_document(doc, run_dir / RESULT_FILE, keep=run_dir / job.script, text=text)
    sys.stdout.flush()
    os._exit(0)  # no atexit handlers or finalizers of the script's objects after the report


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m app.runner.worker")
    parser.add_argument("--serve", metavar="RUN_DIR")
    parser.add_argument("--sandbox", default="{}")
    parser.add_argument("--script")
    parser.add_argument("--out")
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--name")
    parser.add_argument("--max-events", type=int, default=10)
    parser.add_argument("--watch-all", action="store_true")
    parser.add_argument("script_args", nargs="*")
    args = parser.parse_args(argv)
    signal.signal(signal.SIGTERM, _on_term)
    if args.serve:
        return serve(Path(args.serve), json.loads(args.sandbox))
    if not (args.script and args.out):
        parser.error("give --serve RUN_DIR, or --script and --out")

    from app.trace.recorder import RecordingLimits
    from app.trace.tracer import trace_script

    limits = RecordingLimits(max_backward_events=args.max_events,
                             max_step_events=args.max_events, watch_whole_run=args.watch_all)
    doc = trace_script(Path(args.script), name=args.name, argv=args.script_args,
                       device=args.device, limits=limits)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    _write_document(doc, Path(args.out))
    return 0


if __name__ == "__main__":
    sys.exit(main())
