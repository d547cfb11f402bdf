"""A real PostgreSQL for the tests: Debian's server, started on a temporary data directory.

``initdb`` and ``pg_ctl`` from ``/usr/lib/postgresql/*/bin`` (the ``postgresql``
package, which ``make test`` installs when missing) create and start a
cluster listening on 127.0.0.1 only, on a free port. Its TCP connections
need a password (SCRAM), which the session gives libpq in ``PGPASSWORD``
(:meth:`Cluster.start`), as a site's operators would: URLs never hold it. PostgreSQL refuses to run as root, so under root (CI) the
cluster belongs to the unprivileged user ``nobody`` and its commands run
through ``runuser``. Each test gets a database of its own
(:meth:`Cluster.database`); the cluster is stopped and its directory deleted
at the end of the session.
"""

from __future__ import annotations

import glob
import itertools
import os
import pwd
import secrets
import shutil
import socket
import subprocess
import tempfile
from pathlib import Path

#: The user that owns the cluster when the tests run as root.
UNPRIVILEGED = "nobody"
SUPERUSER = "tablesafe"


def binaries() -> Path | None:
    """The newest installed PostgreSQL's bin folder, or None."""
    found = sorted(
        glob.glob("/usr/lib/postgresql/*/bin/initdb"), key=lambda p: int(Path(p).parts[-3])
    )
    return Path(found[-1]).parent if found else None


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class Cluster:
    """A running PostgreSQL cluster of the test session."""

    def __init__(self, bindir: Path) -> None:
        self.bindir = bindir
        # Under /tmp itself: pytest's own temporary folders are closed to other users.
        self.folder = Path(tempfile.mkdtemp(prefix="tablesafe-pg-"))
        self.data = self.folder / "data"
        self.log = self.folder / "server.log"
        self.port = 0
        self.password = secrets.token_hex(16)
        self._names = itertools.count()
        self._as: list[str] = []
        if os.geteuid() == 0:
            user = pwd.getpwnam(UNPRIVILEGED)
            os.chown(self.folder, user.pw_uid, user.pw_gid)
            self._as = ["runuser", "-u", UNPRIVILEGED, "--"]

    def _run(self, *args: str) -> None:
        subprocess.run(
            [*self._as, *args],
            check=True,
            capture_output=True,
            timeout=120,
            cwd=self.folder,
            env={**os.environ, "LC_ALL": "C.UTF-8"},
        )

    def start(self) -> Cluster:
        """Create the cluster and start it on a free port (a few tries: the port may be taken).

        Sets ``PGPASSWORD`` in this process's environment (and so its children's).
        """
        pwfile = self.folder / "password"
        pwfile.write_text(self.password)
        if self._as:
            user = pwd.getpwnam(UNPRIVILEGED)
            os.chown(pwfile, user.pw_uid, user.pw_gid)
        self._run(str(self.bindir / "initdb"), "-D", str(self.data), "-U", SUPERUSER,
                  "--auth-local=trust", "--auth-host=scram-sha-256", f"--pwfile={pwfile}",
                  "--encoding=UTF8", "--locale=C")  # fmt: skip
        pwfile.unlink()
        os.environ["PGPASSWORD"] = self.password
        for attempt in range(3):
            self.port = _free_port()
            options = (
                f"-c listen_addresses=127.0.0.1 -p {self.port} "
                f"-c unix_socket_directories={self.folder} -c max_connections=200 "
                # The cluster is thrown away: it need not survive a crash of the machine.
                "-c fsync=off -c full_page_writes=off"
            )
            try:
                self._run(str(self.bindir / "pg_ctl"), "-D", str(self.data), "-l", str(self.log),
                          "-o", options, "-w", "-t", "60", "start")  # fmt: skip
                return self
            except subprocess.CalledProcessError:
                if attempt == 2:
                    raise RuntimeError(
                        f"PostgreSQL did not start: {self.log.read_text(errors='replace')[-2000:]}"
                    ) from None
        return self

    def url(self, database: str = "postgres") -> str:
        """A libpq URL of one of the cluster's databases."""
        return f"postgresql://{SUPERUSER}@127.0.0.1:{self.port}/{database}"

    def database(self) -> str:
        """A new empty database; its URL."""
        import psycopg

        name = f"t{os.getpid()}_{next(self._names)}"
        with psycopg.connect(self.url(), autocommit=True) as con:
            con.execute(f"CREATE DATABASE {name}")
        return self.url(name)

    def restart(self) -> None:
        """Stop the cluster (fast: its sessions are cut) and start it again on the same port."""
        self._run(str(self.bindir / "pg_ctl"), "-D", str(self.data), "-l", str(self.log), "-m",
                  "fast", "-w", "-t", "60", "restart")  # fmt: skip

    def stop(self) -> None:
        """Stop the cluster (its own processes, by its data directory) and delete it."""
        try:
            self._run(str(self.bindir / "pg_ctl"), "-D", str(self.data), "-m", "fast", "-w",
                      "stop")  # fmt: skip
        finally:
            shutil.rmtree(self.folder, ignore_errors=True)
