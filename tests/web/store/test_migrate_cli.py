"""`autograd-lab migrate` (issue 39): the shared mode's database brought to this release's
schema before a course's processes are restarted one by one, against a real PostgreSQL."""

from __future__ import annotations

import os
import subprocess
import sys

import psycopg
import pytest

from app.web.store.database import STEPS
from tests.postgres import fresh_database
from tests.server import ROOT

pytestmark = pytest.mark.postgres


def migrate(**env: str) -> subprocess.CompletedProcess:
    clean = {k: v for k, v in os.environ.items() if not k.startswith("AUTOGRAD_LAB_")}
    return subprocess.run([sys.executable, "-m", "app.cli", "migrate"], cwd=ROOT,
                          env={**clean, "PYTHONPATH": str(ROOT), **env}, capture_output=True,
                          text=True, timeout=120)


def test_migrate_makes_every_table_once_and_says_the_version(postgres_url):
    database = fresh_database(postgres_url)
    for _ in range(2):  # a second time finds nothing to do
        done = migrate(AUTOGRAD_LAB_DATABASE_URL=database)
        assert done.returncode == 0, done.stderr
        assert f"version {len(STEPS)};" in done.stdout
    with psycopg.connect(database) as db:
        versions = [r[0] for r in db.execute("SELECT version FROM autograd_lab_schema "
                                             "ORDER BY version")]
        assert versions == list(range(1, len(STEPS) + 1))  # each step applied once
        assert db.execute("SELECT to_regclass('procrastinate_jobs') IS NOT NULL").fetchone()[0]


def test_migrate_without_a_database_says_there_is_nothing_to_run():
    done = migrate()
    assert done.returncode == 2
    assert "AUTOGRAD_LAB_DATABASE_URL is not set" in done.stderr


def test_migrate_with_a_database_away_says_so(postgres_url):
    done = migrate(AUTOGRAD_LAB_DATABASE_URL="postgresql://nobody@127.0.0.1:1/none")
    assert done.returncode == 2
    assert "cannot be reached" in done.stderr and "Traceback" not in done.stderr
