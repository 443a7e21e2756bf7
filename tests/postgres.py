"""A throwaway PostgreSQL cluster from Debian's packages, started and stopped by the tests.

``initdb`` in a temporary folder, ``pg_ctl`` to start and stop it, listening on a free loopback
port with its socket in that folder. PostgreSQL refuses to run as root, so when the tests run
as root (CI does) the cluster runs as ``nobody``, the way tests/matrix runs HAProxy and nginx.
Each test that needs a database gets a new one (``new_database``), so tests share the cluster
(about 2 s to create) but no state. A missing PostgreSQL fails the tests, naming the package:
.ci/run installs it.
"""

from __future__ import annotations

import contextlib
import glob
import os
import pwd
import shutil
import socket
import subprocess
import tempfile
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psycopg


def _bin_dir() -> Path:
    on_path = shutil.which("pg_ctl")
    if on_path:
        return Path(on_path).resolve().parent
    found = sorted(glob.glob("/usr/lib/postgresql/*/bin/pg_ctl"))
    assert found, "PostgreSQL is missing: apt-get install postgresql (see .ci/run)"
    return Path(found[-1]).parent


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def _unprivileged(folder: Path, chown: bool = False) -> dict[str, Any]:
    """Popen arguments that run PostgreSQL as nobody when the tests run as root (``chown``:
    give it the folder first)."""
    if os.geteuid() != 0:
        return {}
    nobody = pwd.getpwnam("nobody")
    for path in [folder, *folder.rglob("*")] if chown else []:
        os.chown(path, nobody.pw_uid, nobody.pw_gid)
    return {"user": nobody.pw_uid, "group": nobody.pw_gid, "extra_groups": []}


@dataclass
class Cluster:
    folder: Path
    port: int
    bin: Path

    @property
    def data(self) -> Path:
        return self.folder / "data"

    def url(self, database: str = "postgres") -> str:
        return f"postgresql://postgres@127.0.0.1:{self.port}/{database}"

    def _pg_ctl(self, *args: str) -> None:
        subprocess.run(  # noqa: S603
            [str(self.bin / "pg_ctl"), "-D", str(self.data), "-w", "-t", "60", *args],
            check=True,
            capture_output=True,
            **_unprivileged(self.folder),
        )

    def start(self) -> None:
        options = f"-p {self.port} -k {self.folder} -c listen_addresses=127.0.0.1"
        self._pg_ctl("-l", str(self.folder / "server.log"), "-o", options, "start")

    def stop(self, mode: str = "fast") -> None:
        self._pg_ctl("-m", mode, "stop")

    def new_database(self) -> str:
        """A new, empty database; its URL."""
        name = "t_" + uuid.uuid4().hex[:12]
        with psycopg.connect(self.url(), autocommit=True) as conn:
            conn.execute(f"CREATE DATABASE {name}")
        return self.url(name)

    def remove(self) -> None:
        with contextlib.suppress(subprocess.CalledProcessError):
            self.stop("immediate")
        shutil.rmtree(self.folder, ignore_errors=True)


def start_cluster() -> Cluster:
    """initdb and start a cluster of its own; ``remove`` stops it and deletes it."""
    bin_dir = _bin_dir()
    # Not under pytest's tmp_path: that is private to the user running the tests.
    folder = Path(tempfile.mkdtemp(prefix="sealflow-postgres-"))
    cluster = Cluster(folder, _free_port(), bin_dir)
    settings = _unprivileged(folder, chown=True)
    try:
        subprocess.run(  # noqa: S603
            [
                str(bin_dir / "initdb"),
                "-D",
                str(cluster.data),
                "-U",
                "postgres",
                "--auth=trust",
                "--no-sync",
                "-E",
                "UTF8",
            ],
            check=True,
            capture_output=True,
            **settings,
        )
        with (cluster.data / "postgresql.conf").open("a") as conf:
            # A test cluster: durability is not what is tested, start-up and speed are.
            conf.write("fsync = off\nmax_connections = 300\n")
        cluster.start()
    except BaseException:
        shutil.rmtree(folder, ignore_errors=True)
        raise
    return cluster
