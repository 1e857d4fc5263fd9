"""Two runs starting at once each get a uid while two are free (a race made the second search
try one uid twice and report none free: NoFreeUid beside a free uid)."""

from __future__ import annotations

import os
import sys
import threading

import pytest

from app.runner.sandbox import identity

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="leases kill by uid: root's range")


def test_two_runs_starting_at_once_get_the_two_free_uids(monkeypatch):
    monkeypatch.setattr(identity, "UID_BASE", 3500900000 + (os.getpid() % 1000) * 2)
    monkeypatch.setattr(identity, "UID_COUNT", 2)
    monkeypatch.setattr(identity, "kill_all", lambda uid: 0)  # nothing of ours runs there
    switch = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)  # threads change hands often: the race shows in a few tries
    failures = 0
    try:
        for _ in range(300):
            got: list = []
            barrier = threading.Barrier(2)

            def lease(got=got, barrier=barrier):
                barrier.wait()
                try:
                    got.append(identity.lease_uid())
                except identity.NoFreeUid:
                    got.append(None)

            threads = [threading.Thread(target=lease) for _ in range(2)]
            for t in threads:
                t.start()
            for t in threads:
                t.join()
            failures += got.count(None)
            for lease_ in got:
                if lease_ is not None:
                    lease_.release()
    finally:
        sys.setswitchinterval(switch)
    assert failures == 0
