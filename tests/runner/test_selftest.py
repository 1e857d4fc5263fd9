"""The start-up self-test: every layer is tried on its own and the report says whether it held.
On this project's machines (root, Linux with Landlock and namespaces) all must hold; elsewhere
the unavailable ones are reported as missing, with the reason."""

from __future__ import annotations

import pytest

from app.runner import ForkServer, fork_server_supported, sandbox
from app.runner.sandbox import identity
from app.runner.selftest import run_selftest


@pytest.fixture(scope="module", params=["exec", "forked"])
def report(request):
    """The self-test with fresh workers, and with workers forked from a fork server (what a
    root server uses): every layer must hold either way."""
    if request.param == "exec":
        return run_selftest()
    supported, why = fork_server_supported()
    if not supported:
        pytest.skip(why)
    fork_server = ForkServer().start(wait=True)
    try:
        assert fork_server.usable(), fork_server.failed
        found = run_selftest(fork_server)
        assert "fork server" in found["layers"]["exec"]["detail"]
        assert fork_server.served >= 7  # every probe of a layer was forked from it
        return found
    finally:
        fork_server.stop()


def test_report_names_every_layer(report):
    assert set(report["layers"]) == {"exec", "namespaces", "uid", "rlimits", "cgroups",
                                     "landlock", "seccomp", "own_root", "environment",
                                     "supervisor"}
    for name, layer in report["layers"].items():
        assert layer["detail"], name
        if not layer["available"]:
            assert name in report["missing"] and layer["holds"] is None


@pytest.mark.parametrize("layer", ["namespaces", "uid", "rlimits", "cgroups", "landlock",
                                   "seccomp", "own_root", "environment", "supervisor"])
def test_layer_holds_on_its_own(report, layer):
    info = report["layers"][layer]
    if not info["available"]:
        pytest.skip(f"sandbox layer {layer} unavailable: {info['detail']}")
    failed = {k: c["detail"] for k, c in info["checks"].items() if not c["held"]}
    assert info["checks"] and not failed and info["holds"] is True


def test_landlock_alone_refuses_each_thing(report):
    info = report["layers"]["landlock"]
    if not info["available"]:
        pytest.skip(info["detail"])
    checks = info["checks"]
    assert set(checks) == {"read_passwd", "read_app", "write_outside", "exec", "connect"}
    # the probe ran as root (no uid layer): only Landlock can have refused these
    assert "Permission denied: '/etc/passwd'" in checks["read_passwd"]["detail"]
    assert "Permission denied: '/bin/true'" in checks["exec"]["detail"]


def test_seccomp_alone_refuses_each_thing(report):
    """The filter's probe runs with no other layer: the kernel itself says no to each call."""
    info = report["layers"]["seccomp"]
    if not info["available"]:
        pytest.skip(info["detail"])
    checks = info["checks"]
    assert set(checks) == {"keyring", "netlink_socket", "bpf", "new_user_namespace"}
    assert "Operation not permitted" in checks["keyring"]["detail"]
    assert "Address family not supported" in checks["netlink_socket"]["detail"]


def test_whole_report_ok_here(report):
    assert report["ok"], report["summary"]
    assert report["summary"] == "every sandbox layer is in place and held in the self-test"


def test_a_missing_layer_is_named_with_its_reason(monkeypatch):
    """Not root: the uid layer is reported missing, and why."""
    sandbox.availability.cache_clear()
    monkeypatch.setattr(identity.os, "geteuid", lambda: 1000)
    try:
        avail = sandbox.availability()
        assert avail["uid"]["available"] is False
        assert "not root" in avail["uid"]["detail"]
    finally:
        monkeypatch.undo()
        sandbox.availability.cache_clear()
    assert sandbox.availability()["uid"]["available"] == (identity.os.geteuid() == 0)
