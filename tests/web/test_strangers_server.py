"""A room of strangers (issue 20), against a real server: what one run leaves in the kernel is
not there for the next, and a run cannot reach kernel interfaces a script has no use for. Each
case fails on the revision before the seccomp layer; after each, a normal run still works."""

from __future__ import annotations

import httpx
import pytest

from app.runner import sandbox
from tests.server import serve

pytestmark = [pytest.mark.slow,
              pytest.mark.skipif(not sandbox.availability()["seccomp"]["available"],
                                 reason=sandbox.availability()["seccomp"]["detail"])]

SMALL = "import torch\nw = torch.ones(3, requires_grad=True)\n(w * w).sum().backward()\n"

# each run looks for the key an earlier run left in its uid's user keyring, then leaves one
KEYRING = """
import ctypes, os
libc = ctypes.CDLL(None, use_errno=True)
USER_KEYRING = ctypes.c_int(-4)
found = libc.syscall(250, 10, USER_KEYRING, b"user", b"left-by-an-earlier-run", 0)
found_errno = ctypes.get_errno()
made = libc.syscall(248, b"user", b"left-by-an-earlier-run", b"a secret", 8, USER_KEYRING)
print(os.getuid(), found, made, ctypes.get_errno(), found_errno)
"""


@pytest.fixture(scope="module")
def base(tmp_path_factory):
    # two uids of a range of its own and a fresh worker per run: the runs take turns, so a
    # later run gets an earlier run's uid (a full server's 4,096 come round the same way)
    with serve(tmp_path_factory.mktemp("store"), name="strangers-server", MAX_WORKERS="1",
               UPLOAD_WORKERS="1", POOL_SIZE="0", WARM_LESSONS="false", SELFTEST="false",
               UID_BASE="3500200000", UID_COUNT="2") as url:
        yield url


def post(base: str, source: str) -> dict:
    response = httpx.post(base + "/api/runs", json={"source": source}, timeout=120)
    assert response.status_code == 200, response.text
    return response.json()


def _normal_run_still_works(base: str) -> None:
    after = post(base, SMALL)
    assert after["error"] is None and after["params"]["w"]["uses"] == {"0": 2}


def test_a_key_left_in_the_keyring_is_not_there_for_a_later_run_of_the_same_uid(base):
    seen = []
    for _ in range(4):
        doc = post(base, KEYRING)
        uid, found, made, made_errno, found_errno = map(int, doc["stdout"].split())
        seen.append(uid)
        assert found == -1, f"run {len(seen)} (uid {uid}) read a key an earlier run left"
        assert made == -1 and made_errno == 1, "a run could store a key in its uid's keyring"
        assert found_errno == 1  # refused (EPERM), not merely "no such key"
        assert doc["sandbox"]["seccomp"]["enforced"] is True
    assert len(set(seen)) < len(seen), f"no uid came round again: {seen}"
    _normal_run_still_works(base)


CASES = {
    # the script's own error names the refused call, and says it was the sandbox
    "new-user-namespace": ("import ctypes, os\nlibc = ctypes.CDLL(None, use_errno=True)\n"
                           "if libc.unshare(0x10000000) != 0:\n"
                           "    raise PermissionError(ctypes.get_errno(), 'unshare')\n",
                           "PermissionError", "`unshare` (namespaces)"),
    "raw-socket": ("import socket\ns = socket.socket(socket.AF_PACKET, socket.SOCK_RAW)\n",
                   "OSError", "sockets other than AF_UNIX"),
    "netlink-socket": ("import socket\n"
                       "s = socket.socket(socket.AF_NETLINK, socket.SOCK_RAW, 0)\n",
                       "OSError", "sockets other than AF_UNIX"),
    "vsock": ("import socket\ns = socket.socket(socket.AF_VSOCK, socket.SOCK_STREAM)\n",
              "OSError", "sockets other than AF_UNIX"),
    "keyctl": ("import ctypes, os\nlibc = ctypes.CDLL(None, use_errno=True)\n"
               "if libc.syscall(250, 0, ctypes.c_int(-4), 0) == -1:\n"
               "    raise PermissionError(ctypes.get_errno(), 'keyctl: refused')\n",
               "PermissionError", "`keyctl` (keyrings)"),
}


@pytest.mark.parametrize("name", list(CASES))
def test_kernel_interfaces_a_script_has_no_use_for_are_refused(base, name):
    source, kind, words = CASES[name]
    error = post(base, source)["error"]
    assert error is not None and error["type"] == kind, error
    assert words in error["message"] and "refused by the sandbox" in error["message"], error
    _normal_run_still_works(base)


def test_a_dataloader_with_worker_processes_still_runs(base):
    """What the filter leaves: fork, pipes, AF_UNIX socketpairs (torch's DataLoader workers)."""
    doc = post(base, "import torch\nfrom torch.utils.data import DataLoader, TensorDataset\n"
                     "data = TensorDataset(torch.randn(16, 3))\n"
                     "total = sum(b.sum() for (b,) in DataLoader(data, batch_size=4, "
                     "num_workers=2))\n"
                     "w = torch.ones(3, requires_grad=True)\n(w * w).sum().backward()\n")
    assert doc["error"] is None, doc["error"]
