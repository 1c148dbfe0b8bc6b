"""A PostgreSQL server of the stack's own: Debian's binaries, initdb'd once, on 127.0.0.1 and a port of
its own, password (scram) authentication; one database and role per service.

As root the server runs as the `postgres` user (PostgreSQL refuses root), which may not be able to
enter the stack's folder (a private home or temporary folder): its data and server log then live in
a folder of its own under /var/lib/postgresql, and `STACK/postgres`, `STACK/logs/postgres.log` link
there.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
from pathlib import Path

BIN = next(iter(sorted(Path("/usr/lib/postgresql").glob("*/bin"))), Path("/usr/bin"))


class Postgres:
    def __init__(self, stack: Path, port: int | None = None, password: str | None = None) -> None:
        self.stack, self.port, self.password = stack, port, password
        if os.geteuid() == 0:
            self.home = (
                Path("/var/lib/postgresql/vidtx-stacks") / hashlib.sha1(str(stack).encode()).hexdigest()[:12]
            )
        else:
            self.home = stack / "pg"
        self.data, self.log = self.home / "data", self.home / "postgres.log"

    @staticmethod
    def _as_postgres(command: list[str]) -> list[str]:
        return ["runuser", "-u", "postgres", "--", *command] if os.geteuid() == 0 else command

    def start(self, logs: Path) -> None:
        """initdb (the first time, with the superuser's password), then `pg_ctl start`."""
        self.home.mkdir(parents=True, exist_ok=True)
        if os.geteuid() == 0:
            shutil.chown(self.home.parent, "postgres")
            shutil.chown(self.home, "postgres")
        for link, target in ((self.stack / "postgres", self.data), (logs / "postgres.log", self.log)):
            if not link.is_symlink():
                link.symlink_to(target)
        if not (self.data / "PG_VERSION").exists():
            password = self.home / "postgres.pw"
            password.touch(mode=0o600)
            password.write_text(self.password)
            if os.geteuid() == 0:
                shutil.chown(password, "postgres")
            initdb = [str(BIN / "initdb"), "-D", str(self.data), "-U", "postgres", "-E", "UTF8",
                      "--auth=scram-sha-256", f"--pwfile={password}"]  # fmt: skip
            subprocess.run(self._as_postgres(initdb), check=True, capture_output=True)
            password.unlink()
        start = [str(BIN / "pg_ctl"), "-D", str(self.data), "-l", str(self.log), "-w",
                 "-o", f"-h 127.0.0.1 -p {self.port} -k {self.data}", "start"]  # fmt: skip
        subprocess.run(self._as_postgres(start), check=True, capture_output=True)

    def create_databases(self, passwords: dict[str, str]) -> None:
        """A role and a database of the same name for each service, unless there already."""
        import psycopg2

        connection = psycopg2.connect(
            host="127.0.0.1", port=self.port, user="postgres", password=self.password, dbname="postgres"
        )
        connection.autocommit = True  # CREATE DATABASE runs outside a transaction
        with connection.cursor() as cursor:
            for name, password in passwords.items():
                cursor.execute("SELECT 1 FROM pg_roles WHERE rolname = %s", (name,))
                if cursor.fetchone() is None:
                    cursor.execute(f"CREATE ROLE {name} LOGIN PASSWORD %s", (password,))
                    cursor.execute(f"CREATE DATABASE {name} OWNER {name}")
        connection.close()

    def stop(self) -> bool:
        """`pg_ctl stop -m fast` when it runs; whether it did."""
        if not (self.data / "postmaster.pid").exists():
            return False
        stop = [str(BIN / "pg_ctl"), "-D", str(self.data), "-m", "fast", "-w", "stop"]
        subprocess.run(self._as_postgres(stop), check=False, capture_output=True)
        return True
