"""`autograd-lab serve | worker | trace | render | scenarios`."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from .devices import parse_device

__all__ = ["main"]


def _device(text: str) -> str:
    try:
        return parse_device(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from exc


def _script_path(text: str) -> Path:
    """A file path, or the name of a built-in scenario."""
    path = Path(text)
    if path.is_file():
        return path
    from .catalog import load_catalog

    catalog = load_catalog()
    if text in catalog:
        return catalog[text].path
    raise SystemExit(f"autograd-lab: no such script {text!r}, and no scenario of that name "
                     f"(scenarios: {', '.join(catalog) or 'none'})")


def _trace(args) -> dict:
    from .runner import plain_threads, trace_in_sandbox

    if args.script.endswith(".json") and Path(args.script).is_file():
        from .format import InvalidTrace, validate

        doc = json.loads(Path(args.script).read_text(encoding="utf-8"))
        try:
            validate(doc)  # a Trace file may come from anywhere: checked as the server checks
        except InvalidTrace as exc:
            raise SystemExit(f"autograd-lab: {args.script} is not a Trace document: {exc}") \
                from None
        return doc
    path = _script_path(args.script)
    if path.suffix == ".ipynb":
        return _trace_notebook(path, args)
    # the one run on this machine: torch's threads as a plain `python script.py` would have
    # on the CPU; one on a GPU (plain_threads says why)
    return trace_in_sandbox(path, device=args.device, timeout=args.timeout,
                            args=args.script_args, threads=plain_threads(args.device),
                            watch_all=args.watch_all)


def _trace_notebook(path: Path, args) -> dict:
    """A notebook run as the server runs an uploaded one: its code cells as one script (the
    IPython-only lines skipped and said), its lines said as "cell C, line M"."""
    import tempfile

    from .format.notebook import NotANotebook, annotate, script_from_notebook
    from .runner import plain_threads, trace_in_sandbox

    try:
        notebook = script_from_notebook(path.read_bytes())
    except NotANotebook as exc:
        raise SystemExit(f"autograd-lab: {path}: {exc}") from None
    with tempfile.TemporaryDirectory(prefix="autograd-lab-notebook-") as folder:
        script = Path(folder) / (path.stem + ".py")  # the name tracebacks give
        script.write_text(notebook.source, encoding="utf-8")
        doc = trace_in_sandbox(script, device=args.device, timeout=args.timeout,
                               args=args.script_args, threads=plain_threads(args.device),
                               watch_all=args.watch_all)
    annotate(doc, notebook.document_part(path.name))
    return doc


def _report_error(doc: dict) -> int:
    err = doc.get("error")
    if not err:
        return 0
    notebook = (doc.get("script") or {}).get("notebook")
    if err.get("line") and notebook:
        from .format.notebook import where as cell_where

        where = f" ({cell_where(notebook['cells'], err['line'])} of {notebook['name']})"
    else:
        where = f" (line {err['line']} of {doc['script']['name']})" if err.get("line") else ""
    print(f"autograd-lab: {err['type']}{where}: {err['message']}", file=sys.stderr)
    ex = err.get("explanation")
    if ex and ex.get("code") != "unrecognised":
        print(_explained(ex, notebook["cells"] if notebook else None), file=sys.stderr)
    return 1


def _explained(ex: dict, cells: list[dict] | None = None) -> str:
    """An explained failure as the terminal shows it: what, where, the fix as a diff, scenario.
    A notebook's lines are said as its cells' ("cell 3, line 2"), as the page says them."""
    from .format.explained import explained_lines

    return "\n".join(f"  {line}" for line in explained_lines(ex, cells))


def cmd_trace(args) -> int:
    from .format.json_text import dumps_indented

    doc = _trace(args)
    text = dumps_indented(doc) + b"\n"
    if args.output:
        Path(args.output).write_bytes(text)
    else:
        sys.stdout.flush()
        sys.stdout.buffer.write(text)
        sys.stdout.buffer.flush()
    status = _report_error(doc)
    _say_how_to_give_it_longer(doc, args, args.output or "the Trace printed above")
    return status


def _say_how_to_give_it_longer(doc: dict, args, kept_in: str | None = None,
                               kept: str | None = None) -> None:
    """A script stopped at the limit: the option that raises it, and what was kept (`kept_in`:
    where all its passes are; `kept`: said as is, its own sentence). On one's own machine a
    script that runs plainly for minutes is not wrong, only long (issue 36)."""
    passes = _passes_if_stopped(doc, args)
    if passes is None:
        return
    if kept_in:
        kept = f"What it recorded before the stop is kept in {kept_in}: {passes} backward " \
            "pass(es)."
    print(f"  It had {args.timeout:g} s (--timeout). To let it finish, run it again with a "
          f"longer limit, e.g. --timeout {max(2 * args.timeout, 60):g}."
          f"{' ' + kept if kept else ''}", file=sys.stderr)


def _passes_if_stopped(doc: dict, args) -> int | None:
    """The backward passes a script stopped at --timeout recorded; None, it was not stopped."""
    err = doc.get("error") or {}
    if err.get("type") != "Timeout" or getattr(args, "timeout", None) is None:
        return None
    return sum(1 for e in doc.get("events", ()) if e.get("kind") == "backward")


def _what_the_drawing_shows(doc: dict, args, out: Path) -> str:
    """For a stopped script: the one graph the drawing holds, of all it recorded (said once
    the drawing is written, so never of one that failed)."""
    backward = [e.get("index") for e in doc.get("events", ()) if e.get("kind") == "backward"]
    if args.view is not None:
        shown = f"shows view {args.view} (a graph the script asked for), not the " \
            f"{len(backward)} backward pass(es) recorded before the stop"
    else:
        k = 1 if args.event is None else backward.index(args.event) + 1
        shown = f"shows backward pass {k} of the {len(backward)} recorded before the stop"
    return f"The drawing ({out}) {shown}; `autograd-lab trace -o FILE` keeps them all."


def cmd_render(args) -> int:
    from .render import RenderError, choose_grouping, event_graph, group_graph, render_graph

    doc = _trace(args)
    status = _report_error(doc)
    out = Path(args.output)
    fmt = out.suffix.lstrip(".").lower()
    try:
        flat = event_graph(doc, args.event, args.view)
        grouping = choose_grouping(flat, flat=args.flat, depth=args.depth,
                                   opened=frozenset(args.open or ()))
        graph = group_graph(flat, grouping)
        data = render_graph(graph, fmt, title=doc["script"]["name"])
    except (RenderError, LookupError) as exc:
        print(f"autograd-lab: cannot draw: {exc}", file=sys.stderr)
        _say_how_to_give_it_longer(doc, args, kept="Nothing was drawn; `autograd-lab trace -o "
                                   "FILE` keeps what it recorded.")
        return 1
    out.write_bytes(data)
    _say_how_to_give_it_longer(doc, args, kept=_what_the_drawing_shows(doc, args, out))
    how = "" if grouping.flat else (
        f", drawn by module from {len(flat['nodes'])} nodes (depth "
        f"{'all' if grouping.depth is None else grouping.depth}; --flat draws every node)")
    print(f"wrote {out} ({len(graph['nodes'])} nodes, {len(graph['edges'])} edges{how})")
    return status


def cmd_scenarios(args) -> int:
    from .catalog import load_catalog

    for name, sc in load_catalog().items():
        variants = f"  [variants: {', '.join(sc.variants)}]" if sc.variants else ""
        print(f"{name:26} {sc.title}{variants}")
    return 0


def serve_settings(args):
    """The server's settings: a flag given wins over AUTOGRAD_LAB_HOST/PORT/TOKEN; neither
    given, the default declared in `Settings`. The token may come from a file (`--token-file`,
    AUTOGRAD_LAB_TOKEN_FILE): a `--token` is in every local user's process list."""
    import os

    from app.web.settings import Settings

    token = args.token
    token_file = getattr(args, "token_file", None) or os.environ.get("AUTOGRAD_LAB_TOKEN_FILE")
    if token is not None:
        print("autograd-lab: --token is visible to every user of this machine (ps); give it "
              "in a file with --token-file, or in AUTOGRAD_LAB_TOKEN", file=sys.stderr)
    elif token_file:
        token = _token_from(Path(token_file))
    return Settings.from_env(host=args.host, port=args.port, token=token)


def _token_from(path: Path) -> str:
    """The secret in `path`, its first line without surrounding space."""
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise SystemExit(f"autograd-lab: cannot read the token file {path} "
                         f"({getattr(exc, 'strerror', None) or exc}): give a file the server "
                         "may read, holding the token") from None
    lines = text.strip().splitlines()
    if not lines or not lines[0].strip():
        raise SystemExit(f"autograd-lab: the token file {path} is empty: write the token in it")
    return lines[0].strip()


def cmd_serve(args) -> int:
    import uvicorn

    from app.web.app import create_app
    from app.web.http.slow_clients import BoundedH11Protocol

    settings = serve_settings(args)
    # uvicorn believes no forwarding header itself: create_app reads them only from the proxies
    # named in forwarded_allow_ips (trusted_proxies.py), and auth.py treats a forwarded
    # request as remote, so a proxy's X-Forwarded-For never makes a client look local
    uvicorn.run(create_app(settings), host=settings.host, port=settings.port, log_level="info",
                proxy_headers=False, http=BoundedH11Protocol)
    return 0


def cmd_upload_host(args) -> int:
    import asyncio
    import logging

    from app.web.runs.upload_host import UploadHost
    from app.web.settings import Settings, SettingsError

    logging.basicConfig(level=logging.WARNING, format="%(asctime)s %(name)s: %(message)s")
    if args.command == "worker":
        # its former name: "worker" now means only the sandboxed process that runs a script
        print("autograd-lab worker is now called autograd-lab upload-host; starting it",
              file=sys.stderr)
    try:
        host = UploadHost(Settings.from_env(), name=args.name)
    except (ValueError, SettingsError) as exc:
        print(f"autograd-lab upload-host: {exc}", file=sys.stderr)
        return 2
    from app.web.runs.upload_host import MetricsUnavailable

    try:
        return asyncio.run(host.serve())
    except MetricsUnavailable as exc:
        print(f"autograd-lab upload-host: {exc}", file=sys.stderr)
        return 2


def cmd_teachers(args) -> int:
    """Named teachers' tokens, in the store the server's settings name (the SQLite file, or
    AUTOGRAD_LAB_DATABASE_URL): `add NAME` prints the new token once, `list`, `revoke NAME`."""
    from pathlib import Path

    from app.web.settings import Settings, SettingsError
    from app.web.store.teachers import SharedTeacherTokens, TeacherError, TeacherTokens

    try:
        settings = Settings.from_env()
    except SettingsError as exc:
        print(f"autograd-lab teachers: {exc}", file=sys.stderr)
        return 2
    if settings.database_url:
        from app.web.store.database import Database

        database = Database(settings.database_url, pool_size=1).open()
        teachers: TeacherTokens = SharedTeacherTokens(database)
    else:
        from app.web.store.sqlite import RunStore

        database = None
        teachers = TeacherTokens(RunStore(Path(settings.store_path).expanduser()))
    try:
        if args.action == "add":
            token = teachers.add(args.name or "")
            print(token)
            print(f"the token of teacher {args.name!r}, shown this once: give it to them. It "
                  "works on this server's store while the server has a token of its own.",
                  file=sys.stderr)
        elif args.action == "revoke":
            teachers.revoke(args.name or "")
            print(f"teacher {args.name!r} revoked: refused within a few seconds on every web "
                  "process", file=sys.stderr)
        else:
            for row in teachers.listed():
                print(f"{row['name']}\t{'revoked' if row['revoked'] else 'active'}")
    except TeacherError as exc:
        print(f"autograd-lab teachers: {exc}", file=sys.stderr)
        return 2
    finally:
        if database is not None:
            database.close()
    return 0


def cmd_migrate(args) -> int:
    """The shared mode's database brought to this release's schema: our numbered, additive
    steps it lacks, and Procrastinate's tables if missing; then the version said. What every
    process of this release does when it starts, run once before restarting them one by one."""
    from app.web.settings import Settings, SettingsError
    from app.web.store.common import StoreUnavailable

    try:
        settings = Settings.from_env()
    except SettingsError as exc:
        print(f"autograd-lab migrate: {exc}", file=sys.stderr)
        return 2
    if not settings.database_url:
        print("autograd-lab migrate: AUTOGRAD_LAB_DATABASE_URL is not set: one machine's SQLite "
              "store is brought up to date by `autograd-lab serve` as it starts, with nothing "
              "to run first", file=sys.stderr)
        return 2
    from app.web.store.database import STEPS, Database

    try:
        database = Database(settings.database_url, pool_size=1).open()
    except StoreUnavailable as exc:
        print(f"autograd-lab migrate: {exc}", file=sys.stderr)
        return 2
    try:
        database.procrastinate_schema()
        version = database.schema_version()
    finally:
        database.close()
    later = " (a later release's: this one works beside it)" if version > len(STEPS) else ""
    print(f"the database's schema is at version {version}{later}; this release's is "
          f"{len(STEPS)}")
    return 0


def build_parser() -> argparse.ArgumentParser:
    from app.web.settings import default_of

    parser = argparse.ArgumentParser(prog="autograd-lab", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)

    def run_options(p):
        p.add_argument("script", help="a Python script, a Jupyter notebook (.ipynb: its code "
                       "cells, as the server runs an upload), a scenario name, or a trace .json")
        p.add_argument("--device", type=_device, default="cpu", help="cpu, cuda or cuda:N")
        p.add_argument("--timeout", type=float, default=default_of("trace_timeout"),
                       help="wall-clock limit, seconds (default: %(default)s)")
        p.add_argument("--watch-all", action="store_true",
                       help="watch every operation to the end of the run, not only through the "
                       "backward passes it records (slower; a failure after them is then "
                       "explained by its line)")

    p = sub.add_parser("trace", help="run a script and write its Trace document (JSON)")
    run_options(p)
    p.add_argument("-o", "--output", help="file to write (default: standard output)")
    p.set_defaults(func=cmd_trace)

    p = sub.add_parser("render", help="run a script and draw its backward graph")
    run_options(p)
    p.add_argument("-o", "--output", default="graph.svg", help="graph.svg, graph.png or graph.dot")
    p.add_argument("--event", type=int, help="which backward event (default: the first)")
    p.add_argument("--view", type=int, help="draw instead a graph the script asked for: its "
                   "make_dot calls and create_graph gradients, numbered from 0")
    p.add_argument("--flat", action="store_true", help="every node, however many (a graph of "
                   "more than 300 is otherwise drawn by module)")
    p.add_argument("--depth", type=int, help="draw modules this deep closed (0: every module "
                   "open, repeated blocks still folded)")
    p.add_argument("--open", action="append", metavar="PATH", help="a module (or fold, "
                   "layers.0-47) to draw open; may be given several times")
    p.set_defaults(func=cmd_render)

    p = sub.add_parser("scenarios", help="list the built-in scenarios")
    p.set_defaults(func=cmd_scenarios)

    p = sub.add_parser("serve", help="serve the web app")
    # no defaults here: Settings declares them, and AUTOGRAD_LAB_HOST/PORT apply when unset
    p.add_argument("--host", help=f"address to bind (default: AUTOGRAD_LAB_HOST, else "
                   f"{default_of('host')})")
    p.add_argument("--port", type=int, help=f"port to bind (default: AUTOGRAD_LAB_PORT, else "
                   f"{default_of('port')})")
    who = p.add_mutually_exclusive_group()
    who.add_argument("--token", help="secret that running uploaded code needs (sent as "
                     "'Authorization: Bearer TOKEN'); required to accept uploads off loopback "
                     "(default: AUTOGRAD_LAB_TOKEN); other users of the machine see it in ps: "
                     "prefer --token-file")
    who.add_argument("--token-file", metavar="PATH", help="read the token from this file's "
                     "first line (default: AUTOGRAD_LAB_TOKEN_FILE)")
    p.set_defaults(func=cmd_serve)

    p = sub.add_parser("upload-host", aliases=["worker"], help="run uploads from the shared "
                       "line on this machine (with AUTOGRAD_LAB_DATABASE_URL set, on any number "
                       "of machines; `worker` is its former name)")
    p.add_argument("--name", help="how this upload host is named in the line (default: "
                   "host:pid)")
    p.set_defaults(func=cmd_upload_host)

    p = sub.add_parser("teachers", help="named teachers' tokens: add NAME (prints its token), "
                       "list, revoke NAME")
    p.add_argument("action", choices=["add", "list", "revoke"])
    p.add_argument("name", nargs="?", help="the teacher's name (add, revoke)")
    p.set_defaults(func=cmd_teachers)

    p = sub.add_parser("migrate", help="bring the shared mode's database "
                       "(AUTOGRAD_LAB_DATABASE_URL) to this release's schema and say its version")
    p.set_defaults(func=cmd_migrate)
    return parser


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    # everything after `--` belongs to the script, not to us
    script_args = argv[argv.index("--") + 1:] if "--" in argv else []
    ours = argv[:argv.index("--")] if "--" in argv else argv
    args = build_parser().parse_args(ours)
    args.script_args = script_args
    if args.func not in (cmd_trace, cmd_render):
        return args.func(args)
    return _run_stoppably(args)


class _Stopped(KeyboardInterrupt):
    """SIGTERM or SIGHUP, raised where the CLI waits: the same unwinding as Ctrl-C, so the
    worker is stopped and its run folder removed (the default action killed the CLI alone and
    left the folder behind)."""

    def __init__(self, number: int) -> None:
        super().__init__(number)
        self.number = number


def _run_stoppably(args) -> int:
    import signal

    def stop(number, _frame):
        raise _Stopped(number)

    for number in (signal.SIGTERM, signal.SIGHUP):
        signal.signal(number, stop)
    try:
        return args.func(args)
    except KeyboardInterrupt as exc:
        number = exc.number if isinstance(exc, _Stopped) else signal.SIGINT
        print(f"autograd-lab: stopped by {signal.Signals(number).name}; the script's worker "
              "was stopped with it, and nothing was traced", file=sys.stderr)
        return 128 + number


if __name__ == "__main__":
    sys.exit(main())
