"""Every setting of the web app, declared once: its name, default, meaning and how it is read.

Each field of `Settings` is one setting: its environment variable is `AUTOGRAD_LAB_` and the
name in capitals; its type says how the variable is parsed (booleans are written 1/true/yes/on
or 0/false/no/off); its `help` and the default a person is shown are in the field's metadata.
`settings_table()` makes the table in docs/settings.md from these declarations (a test holds
that page to it), so the defaults are written nowhere else: `autograd-lab serve`'s flags read
them from here.
Bad values are refused at start with a message naming the setting.
"""

from __future__ import annotations

import ipaddress
import logging
import os
import resource
from dataclasses import MISSING, dataclass, field, fields
from pathlib import Path

from app.runner import ResourceLimits

__all__ = ["Settings", "SettingsError", "settings_table"]

_ENV_PREFIX = "AUTOGRAD_LAB_"
log = logging.getLogger(__name__)

# settings renamed so that each word means one thing (docs/ARCHITECTURE.md, "Words"): an
# environment written for the former name still works, and the server says the new one
FORMER_NAMES = {"lesson_workers": "scenario_workers", "warm_lessons": "warm_scenarios",
                "max_workers": "max_drawings"}


class SettingsError(ValueError):
    """A setting has a value the app cannot use; the message names it."""


def _boolean(raw: str) -> bool:
    # bool("0") is True: spell the words out rather than trust the constructor
    word = raw.strip().lower()
    if word in ("1", "true", "yes", "on"):
        return True
    if word in ("0", "false", "no", "off"):
        return False
    raise ValueError(raw)


def _cores() -> int:
    return max(1, os.cpu_count() or 1)


def _connection_cap() -> int:
    # each connection is a file descriptor, and the workers' pipes and the store need theirs
    soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
    return max(64, min(2000, soft // 2)) if soft != resource.RLIM_INFINITY else 2000


def setting(default, help: str, shown: str | None = None, factory=None):
    """One setting's declaration: its default (or a `factory` that works it out on this
    machine: the number of cores, a home folder), what it means, and how its default is shown
    when that differs from the value."""
    meta = {"help": help, "shown": shown}
    if factory is not None:
        return field(default_factory=factory, metadata=meta)
    return field(default=default, metadata=meta)


@dataclass(frozen=True)
class Settings:
    host: str = setting("127.0.0.1", "address the server binds")
    port: int = setting(8000, "port the server binds")
    trace_timeout: float = setting(60.0, "wall-clock limit of a scenario's run, seconds")
    upload_timeout: float = setting(
        20.0, "wall-clock limit of uploaded code, seconds: the scenarios take under 2 s in a warm "
        "worker and a tutorial-style script a few seconds; 20 s leaves room on a busy 2-core "
        "machine and bounds what a stuck script costs the room")
    per_client_running: int = setting(
        1, "runs one person may have running (the session cookie the pages set, else the "
        "client's address); past it and per_client_queued, 429")
    per_client_queued: int = setting(2, "runs one person may have waiting")
    scenario_workers: int = setting(
        1, "workers kept for scenarios: scenarios have workers, a queue and a cache of their own "
        "and never wait behind uploaded code")
    warm_scenarios: bool = setting(True, "trace every scenario at start-up")
    max_drawings: int = setting(
        None, "drawings (graphviz) at once, in each of two lanes: scenarios' and uploads' (an "
        "upload's person has one at a time)", shown="cores", factory=_cores)
    drawing_timeout: float = setting(
        300.0, "longest one graphviz layout may take, seconds (at most 60 for a graph of up to "
        "300 nodes); a drawing past it is refused, and asked for again refused at once")
    drawing_variants: int = setting(
        64, "distinct drawings (grouping, type size, format; graph.json counts) made of one run "
        "or scenario run: a person exploring a big model makes a few dozen; past it, 429 saying "
        "to use one already made, so a flood of variants cannot evict other drawings")
    upload_workers: int = setting(
        0, "uploads running at once; 0 (auto): 3 x max_drawings with a fork server (a forked run "
        "costs little to start, so a few endless scripts cannot hold every worker), max_drawings "
        "without", shown="0 (auto)")
    cache_size: int = setting(64, "scenario Traces kept in memory (drawings: twice as many "
                              "for scenarios, and twice as many again for uploads)")
    queue_size: int = setting(32, "runs that may wait for a worker (then 503)")
    token: str = setting(
        "", "when set, every upload needs it, on loopback too; bound to another address, "
        "uploads are refused without one", shown="(none)")
    max_upload_bytes: int = setting(64 * 1024, "largest script or notebook code, bytes (then 413)")
    store_path: str = setting(
        None, "the SQLite file where submitted runs are kept",
        shown="~/.cache/autograd-lab/runs.sqlite3",
        factory=lambda: str(Path.home() / ".cache" / "autograd-lab" / "runs.sqlite3"))
    database_url: str = setting(
        "", "PostgreSQL (postgresql://user:password@host/db): the runs and the cookies' signing "
        "key are kept there instead, shared by every web process, kept across restarts "
        "(docs/SCALING.md; the `shared` extra installs psycopg)", shown="(none: store_path)")
    store_max_runs: int = setting(500, "runs kept; past it, the runs of whoever holds the most "
                                  "(a person, or their address over per_address_people) go "
                                  "first, oldest first (a run sent to a class's teacher is "
                                  "kept 12 hours, 3 a person, a quarter of the store in all)")
    store_max_bytes: int = setting(256 * 1024 * 1024, "bytes kept (gzip Traces and their "
                                   "figures); past it, the runs of whoever holds the most "
                                   "bytes go first, oldest first")
    store_max_run_bytes: int = setting(
        16 * 1024 * 1024, "gzip bytes of one run; a larger run is stored as its script and an "
        "error saying so")
    pool_size: int = setting(
        None, "sandboxed workers started ahead of time; 0 starts a fresh worker for each run",
        shown="cores", factory=_cores)
    selftest: bool = setting(
        True, "the sandbox self-test at start-up; off, /healthz and the page say so and uploads "
        "from other hosts are refused")
    allowed_hosts: str = setting(
        "", "comma-separated host names (the Host header, port aside) it answers to besides "
        "localhost, 127.0.0.1, ::1 and the bind address; bound to 0.0.0.0 or :: with none "
        "given, every name is accepted (uploads there need the token anyway)", shown="(none)")
    run_memory_mb: int = setting(
        ResourceLimits.run_memory_mb, "memory of a whole run, MiB: all its processes, files in "
        "memory and shared memory included (a cgroup where the machine has one; each process "
        "also has its own address-space limit)")
    all_runs_memory_mb: int = setting(
        0, "memory of all runs together, MiB, in one cgroup above theirs (past it the kernel "
        "stops the largest run, which is told why); 0 (auto): three quarters of the machine's "
        "memory (or of the server's own cgroup's), the rest for the server and the system",
        shown="0 (auto)")
    max_classes: int = setting(50, "class sessions open at once")
    ended_class_retention_days: float = setting(
        30.0, "in the shared mode (database_url), days an ended class's row (its members, "
        "questions, answers, the runs sent to its teacher) is kept after its last change, "
        "then deleted, with its followers' counts, by the web processes within the hour; 0 "
        "keeps them for ever. The runs themselves are their senders' and are bounded by the "
        "store's settings. On one machine an ended class is forgotten at once")
    per_address_people: int = setting(
        4, "people one network address may stand for: a browser's limits (runs running and "
        "waiting, answers to a question, pages following a class, runs sent to the teacher) "
        "also hold per address, times this, and a class lets in at most this many browsers from "
        "one address, since fresh cookies cost nothing; a classroom behind one NAT needs no "
        "change here: its teacher switches on \"This room shares one network address\" and "
        "each student who joined counts as a person")
    request_read_timeout: float = setting(
        10.0, "seconds a request may take to arrive whole (head and body); past it the "
        "connection is closed, so a client sending a byte at a time holds nothing for long "
        "(a request that has arrived is not timed: event streams stay open)")
    send_timeout: float = setting(
        60.0, "seconds a connection may go without its client taking any of the answer while "
        "the answer waits (the socket's buffer full); past it the connection is closed (a page "
        "following a class is sent a line every 15 s and reads it)")
    max_connections: int = setting(
        None, "connections open at once; past it, a request is answered 503 and its "
        "connection closed; past three quarters of it, an address already holding 8 gets no "
        "more (the rest are kept for addresses holding few; a room behind one NAT is then "
        "held to what it has, a trusted proxy is not)", shown="half the open-file limit, 64-2000",
        factory=_connection_cap)
    per_address_connections: int = setting(
        256, "connections open at once from one network address (a browser opens about 6, "
        "plus one per page following a class: a room behind one NAT needs ~8 per student)")
    loopback_addresses_apart: bool = setting(
        False, "count each loopback address (127.0.0.0/8) as a place of its own in the "
        "per-address limits; false, all of loopback is one place, since any user of this "
        "machine can bind any of them (true only where they stand for different machines, "
        "as in tests)")
    loopback_members_unsandboxed: bool = setting(
        False, "class members on the server's own machine (loopback) run code even where the "
        "sandbox is not whole (the self-test failed, or an ordinary user's server without the "
        "whole-run memory limit); false, only the token's holder does there")
    wait_for_upload_hosts: bool = setting(
        False, "in the shared mode (database_url), when no upload host has been heard from "
        "for 30 s: false, an upload is refused at once (503, with what to do); true, it is "
        "accepted and waits in line for one, its status saying that none is running")
    forwarded_allow_ips: str = setting(
        "", "reverse proxies whose X-Forwarded-For is believed, comma-separated addresses or "
        "networks (`127.0.0.1`, `10.0.0.0/8`; `*` trusts every peer: only where nothing else "
        "can reach the server); requests through them count against the per-address limits by "
        "the address they were forwarded for, and connections from them are held only to "
        "max_connections; empty: no header is believed, and behind a proxy the whole course is "
        "one address", shown='"" (none)')
    forkserver: bool = setting(
        True, "fork each run's worker from a warm process that imported torch once (~0.1 s "
        "instead of ~3 s of CPU); not root, each child enters a user namespace of its own; "
        "where the kernel allows none, or off, every run starts a fresh worker")

    metrics: bool = setting(
        False, "serve Prometheus metrics at /metrics (behind the token when one is set): runs "
        "by lane and outcome, their queue wait and run time, 429/503 answers by reason, class "
        "event streams and followers, drawings, and the shared mode's database pool; off, "
        "/metrics is 404")
    upload_host_metrics_port: int = setting(
        0, "an upload host (`autograd-lab upload-host`) serves Prometheus metrics on this port: "
        "its runs by outcome, their queue wait and run time, workers that ended before they "
        "were ready, its slots and runs going on, its database pool; no token guards it, so "
        "it listens on upload_host_metrics_address only; 0: none", shown="0 (none)")
    upload_host_metrics_address: str = setting(
        "127.0.0.1", "the address an upload host's metrics listen on: loopback, for a scraper "
        "on the same machine; another (a container's own) only where nothing but the scraper "
        "can reach the port")

    def __post_init__(self) -> None:
        if not 0 < self.port < 65536:
            raise SettingsError(f"port must be between 1 and 65535, not {self.port}")
        if not 0 <= self.upload_host_metrics_port < 65536:
            raise SettingsError(f"upload_host_metrics_port must be between 1 and 65535, or 0 "
                                f"(none), not {self.upload_host_metrics_port}")
        try:
            ipaddress.ip_address(self.upload_host_metrics_address)
        except ValueError:
            raise SettingsError(f"upload_host_metrics_address must be an IP address (127.0.0.1, "
                                f"::1), not {self.upload_host_metrics_address!r}") from None
        if self.trace_timeout <= 0 or self.upload_timeout <= 0:
            raise SettingsError(f"trace_timeout and upload_timeout must be positive, not "
                                f"{self.trace_timeout} and {self.upload_timeout}")
        if self.per_client_running < 1 or self.per_client_queued < 0:
            raise SettingsError("per_client_running must be at least 1 and per_client_queued "
                                "0 or more")
        if self.scenario_workers < 1:
            raise SettingsError(f"scenario_workers must be at least 1, not {self.scenario_workers}")
        if self.upload_workers < 0:
            raise SettingsError(f"upload_workers must be 0 (auto) or more, not "
                                f"{self.upload_workers}")
        if self.max_drawings < 1:
            raise SettingsError(f"max_drawings must be at least 1, not {self.max_drawings}")
        if self.drawing_timeout <= 0 or self.drawing_variants < 1:
            raise SettingsError(f"drawing_timeout must be positive and drawing_variants at "
                                f"least 1, not {self.drawing_timeout} and "
                                f"{self.drawing_variants}")
        if self.cache_size < 1:
            raise SettingsError(f"cache_size must be at least 1, not {self.cache_size}")
        if self.queue_size < 0:
            raise SettingsError(f"queue_size must be 0 or more, not {self.queue_size}")
        if self.max_upload_bytes < 1024:
            raise SettingsError(f"max_upload_bytes must be at least 1024, not "
                                f"{self.max_upload_bytes}")
        if self.store_max_runs < 1 or self.store_max_bytes < 1 or self.store_max_run_bytes < 1:
            raise SettingsError("store_max_runs, store_max_bytes and store_max_run_bytes must "
                                "be positive")
        if self.database_url and not self.database_url.startswith(("postgresql://",
                                                                   "postgres://")):
            raise SettingsError("database_url must be a PostgreSQL URL (postgresql://user@host/"
                                "database), or empty for the SQLite file at store_path")
        if self.run_memory_mb < 512:
            raise SettingsError(f"run_memory_mb must be at least 512 (a worker with torch "
                                f"loaded takes about 300), not {self.run_memory_mb}")
        if self.all_runs_memory_mb and self.all_runs_memory_mb < self.run_memory_mb:
            raise SettingsError(f"all_runs_memory_mb must be 0 (auto) or at least run_memory_mb "
                                f"({self.run_memory_mb}), not {self.all_runs_memory_mb}")
        if self.max_classes < 1:
            raise SettingsError(f"max_classes must be at least 1, not {self.max_classes}")
        if not 0 <= self.ended_class_retention_days < 100_000:
            raise SettingsError(f"ended_class_retention_days must be 0 (keep for ever) or a "
                                f"number of days, not {self.ended_class_retention_days}")
        if self.request_read_timeout <= 0 or self.send_timeout <= 0:
            raise SettingsError(f"request_read_timeout and send_timeout must be positive, not "
                                f"{self.request_read_timeout} and {self.send_timeout}")
        if self.max_connections < 1 or self.per_address_connections < 1:
            raise SettingsError("max_connections and per_address_connections must be at "
                                "least 1")
        try:  # read as trusted_proxies.py reads it
            for item in self.forwarded_allow_ips.split(","):
                if item.strip() not in ("", "*"):
                    ipaddress.ip_network(item.strip(), strict=False)
        except ValueError as exc:
            raise SettingsError(f"forwarded_allow_ips must be addresses or networks separated "
                                f"by commas (10.0.0.5, 10.0.0.0/8) or *, not "
                                f"{self.forwarded_allow_ips!r} ({exc})") from None
        if self.pool_size < 0:
            raise SettingsError(f"pool_size must be 0 or more, not {self.pool_size}")

    @classmethod
    def from_env(cls, environ: dict[str, str] | None = None, **overrides) -> Settings:
        environ = os.environ if environ is None else environ
        values: dict = {}
        for f in fields(cls):
            raw = environ.get(env_name(f.name))
            if raw is None:
                raw = _read_former_name(environ, f.name)
            if raw is None:
                continue
            kind = type(default_of(f.name))
            try:
                values[f.name] = _boolean(raw) if kind is bool else kind(raw)
            except ValueError as exc:
                raise SettingsError(f"{env_name(f.name)}={raw!r} is not a valid "
                                    f"{kind.__name__}") from exc
        values.update({k: v for k, v in overrides.items() if v is not None})
        return cls(**values)


def _read_former_name(environ, name: str) -> str | None:
    """The value set under the setting's former name, if any, with a warning that names both."""
    for former, now in FORMER_NAMES.items():
        if now == name and env_name(former) in environ:
            log.warning("%s is now called %s; its value is used", env_name(former),
                        env_name(now))
            return environ[env_name(former)]
    return None


def env_name(name: str) -> str:
    return _ENV_PREFIX + name.upper()


def default_of(name: str):
    """A setting's default as this machine works it out (cores, a home folder)."""
    f = {f.name: f for f in fields(Settings)}[name]
    return f.default_factory() if f.default is MISSING else f.default


def settings_table() -> str:
    """Every setting as a Markdown table, from the declarations: docs/settings.md carries it."""
    rows = ["| setting | environment variable | default | meaning |", "|---|---|---|---|"]
    for f in fields(Settings):
        shown = f.metadata["shown"]
        if shown is None:
            value = f.default
            shown = str(value).lower() if isinstance(value, bool) else str(value)
        rows.append(f"| {f.name} | `{env_name(f.name)}` | {shown} | {f.metadata['help']} |")
    return "\n".join(rows) + "\n"
