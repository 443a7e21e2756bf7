"""The checks of deploy/ci/run.sh: the image and the compose stack, run for real.

Run by run.sh once its own dockerd is up and the images are built (DOCKER_HOST names that
daemon). Every check is an assertion: the first that fails ends the run with exit status 1 and
says what it saw. Each step prints its name, then PASS with its duration.

    python deploy/ci/checks.py --docker /usr/bin/docker --project <copy of the tree>
        --benchmarks <repo>/benchmarks --postgres-image postgres:17

The data checks go through the client library of the Python that runs this file (sealflow
installed) and through curl, as an operator's would.
"""

from __future__ import annotations

import argparse
import base64
import contextlib
import filecmp
import json
import os
import re
import secrets
import shutil
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, Literal

import yaml

from sealflow.service.client import Client

KIB, MIB = 1024, 1024 * 1024
UID = "10001"  # the image's user (Dockerfile)
PROJECT = "sfci"  # the compose project name
REPLICAS = 3
# Published ports of the stack on loopback, each a free one the kernel picks: other programs on
# this machine may hold 8080, 9090 or 8089, and nothing outside should reach this stack.
PORTS = {
    "BALANCER_PORT": "127.0.0.1:",
    "PROMETHEUS_PORT": "127.0.0.1:",
    "LOCUST_PORT": "127.0.0.1:",
}

# The clock of run.sh's lines, so that the times of one run read on (seconds since its start).
T0 = float(os.environ.get("SEALFLOW_CI_T0", time.time()))


def say(text: str) -> None:
    print(f"[{time.time() - T0:6.1f} s] {text}", flush=True)


@contextlib.contextmanager
def step(name: str) -> Iterator[None]:
    start = time.monotonic()
    say(f"STEP {name}")
    try:
        yield
    except BaseException:
        say(f"FAIL {name} ({time.monotonic() - start:.1f} s)")
        raise
    say(f"PASS {name} ({time.monotonic() - start:.1f} s)")


class Checks:
    def __init__(self, args: argparse.Namespace) -> None:
        self.docker_bin: str = args.docker
        self.project = Path(args.project)
        self.benchmarks = Path(args.benchmarks)
        self.postgres_image: str = args.postgres_image
        self.tmp = Path(tempfile.mkdtemp(prefix="sfci-checks-"))
        self.env = {**os.environ, **PORTS}
        self.made: list[Path] = []  # the secret files written into the project's copy

    # -- tools ------------------------------------------------------------------------------

    def run(
        self,
        *command: str,
        check: bool = True,
        env: dict[str, str] | None = None,
        cwd: Path | None = None,
    ) -> subprocess.CompletedProcess[str]:
        done = subprocess.run(  # noqa: S603 (our own commands)
            command, capture_output=True, text=True, check=False, env=env or self.env, cwd=cwd
        )
        if check and done.returncode:
            raise AssertionError(
                f"{' '.join(command)} exited {done.returncode}:\n"
                f"{done.stdout[-3000:]}{done.stderr[-3000:]}"
            )
        return done

    def docker(self, *args: str, check: bool = True) -> str:
        return self.run(self.docker_bin, *args, check=check).stdout.strip()

    def compose(self, *args: str, check: bool = True, env: dict[str, str] | None = None) -> str:
        command = ("docker-compose", "-p", PROJECT, *args)
        return self.run(*command, check=check, env=env, cwd=self.project).stdout.strip()

    def inspect(self, container: str, template: str) -> str:
        return self.docker("inspect", "-f", template, container)

    def ip(self, container: str) -> str:
        return self.inspect(
            container, "{{range .NetworkSettings.Networks}}{{.IPAddress}} {{end}}"
        ).split()[0]

    def wait(
        self,
        what: str,
        ready: Callable[[], bool],
        timeout: float,
        every: float = 0.5,
        logs: tuple[str, ...] = (),
    ) -> None:
        """Until ready() is true; else fail, with the last log lines of the `logs` services."""
        deadline = time.monotonic() + timeout
        while not ready():
            if time.monotonic() > deadline:
                seen = ""
                if logs:
                    done = self.run(
                        "docker-compose",
                        "-p",
                        PROJECT,
                        "--profile",
                        "load",
                        "logs",
                        "--no-color",
                        "--tail",
                        "20",
                        *logs,
                        check=False,
                        cwd=self.project,
                    )
                    seen = f"\n{done.stdout}{done.stderr}"
                raise AssertionError(f"not within {timeout:.0f} s: {what}{seen}")
            time.sleep(every)

    def healthy(self, container: str) -> bool:
        state = self.inspect(container, "{{.State.Status}} {{.State.Health.Status}}")
        if state.startswith(("exited", "dead")) or state.endswith("unhealthy"):
            logs = self.run(self.docker_bin, "logs", "--tail", "30", container, check=False)
            raise AssertionError(f"{container}: {state}\n{logs.stdout}{logs.stderr}")
        return state == "running healthy"

    def master_key(self, path: Path) -> None:
        """As docs/DEPLOY.md tells operators: 32 random bytes in base64, 0600, owned by the
        image's user (uid 10001), so the replicas can read it and nobody else on the host."""
        path.write_text(base64.b64encode(os.urandom(32)).decode() + "\n")
        os.chmod(path, 0o600)
        os.chown(path, int(UID), int(UID))

    def root_token(self, logs: str) -> str:
        tokens = re.findall(r"^(?:\S+\s+\|\s+)?Root token: (\S+)$", logs, re.MULTILINE)
        assert len(tokens) == 1, f"expected one 'Root token:' line, got {len(tokens)}"
        return str(tokens[0])

    def curl_round_trip(
        self, url: str, token: str, src: Path, *, duplex: bool, mode: str = "stream"
    ) -> None:
        sealed, opened = self.tmp / "curl.sealed", self.tmp / "curl.opened"
        head = self.tmp / "curl.head"
        extra = ["-H", "Sealflow-Duplex: 1"] if duplex else []
        common = ["curl", "-sS", "--fail-with-body", "--max-time", "300", "-X", "POST"]
        common += ["-H", f"Authorization: Bearer {token}", "-D", str(head), *extra]
        self.run(
            *common, "-T", str(src), "-o", str(sealed), f"{url}/v1/keys/default/encrypt?mode={mode}"
        )
        echoed = "sealflow-duplex: 1" in head.read_text().lower()
        assert echoed == duplex, f"duplex asked {duplex}, echoed {echoed}:\n{head.read_text()}"
        assert sealed.read_bytes()[:4] == b"SFL1", "encrypt: not a sealflow envelope"
        self.run(*common, "-T", str(sealed), "-o", str(opened), f"{url}/v1/decrypt")
        assert filecmp.cmp(src, opened, shallow=False), "curl: the plaintext came back different"
        sealed.unlink()
        opened.unlink()

    def http(
        self, url: str, *, token: str | None = None, data: bytes | None = None
    ) -> tuple[int, bytes]:
        method = "POST" if data is not None else "GET"
        request = urllib.request.Request(url, data=data, method=method)  # noqa: S310 (http://)
        if token:
            request.add_header("Authorization", f"Bearer {token}")
        try:
            with urllib.request.urlopen(request, timeout=10) as reply:  # noqa: S310 (http only)
                return reply.status, reply.read()
        except urllib.error.HTTPError as e:
            return e.code, e.read()

    # -- the checks -------------------------------------------------------------------------

    def postgres(self) -> None:
        """The postgres stand-in behaves as the official image does for compose's variables."""
        name, password = "sfci-postgres", secrets.token_urlsafe(16)
        secret = self.tmp / "postgres_password"
        secret.write_text(password + "\n")
        secret.chmod(0o600)  # root's: the entry point reads it before it drops privileges
        self.docker(
            "run", "-d", "--name", name, "-v", "sfci-postgres:/var/lib/postgresql/data",
            "--mount", f"type=bind,src={secret},dst=/run/secrets/postgres_password,readonly",
            "-e", "POSTGRES_PASSWORD_FILE=/run/secrets/postgres_password",
            "-e", "POSTGRES_USER=sealflow", "-e", "POSTGRES_DB=sealflow", self.postgres_image,
        )  # fmt: skip
        ready = ("exec", name, "pg_isready", "-h", "127.0.0.1", "-U", "sealflow", "-d", "sealflow")
        self.wait(
            "pg_isready", lambda: self.run(self.docker_bin, *ready, check=False).returncode == 0, 60
        )
        url = f"postgresql://sealflow:{password}@127.0.0.1:5432/sealflow"
        who = self.docker(
            "exec", name, "psql", url, "-Atc", "select current_user, current_database()"
        )
        assert who == "sealflow|sealflow", who
        wrong = self.run(
            self.docker_bin,
            "exec",
            name,
            "psql",
            url.replace(password, "wrong"),
            "-c",
            "select 1",
            check=False,
        )
        assert wrong.returncode != 0
        assert "password authentication failed" in wrong.stderr, wrong.stderr
        assert self.docker("exec", name, "cat", "/var/lib/postgresql/data/PG_VERSION").isdigit()
        # Kept across a restart, on the volume, and not initialised twice.
        self.docker("exec", name, "psql", url, "-c", "create table kept (x int)")
        self.docker("restart", name)
        self.wait(
            "pg_isready after restart",
            lambda: self.run(self.docker_bin, *ready, check=False).returncode == 0,
            60,
        )
        assert self.docker("exec", name, "psql", url, "-Atc", "select count(*) from kept") == "0"
        self.docker("rm", "-f", "-v", name)
        self.docker("volume", "rm", "sfci-postgres")
        say(
            f"    {self.postgres_image}: {who}, POSTGRES_PASSWORD_FILE, password auth, "
            "data in /var/lib/postgresql/data kept"
        )

    def one_container(self) -> None:
        name = "sfci-one"
        key = self.tmp / "master.key"
        self.master_key(key)
        self.docker(
            "run", "-d", "--name", name, "-v", "sfci-one-data:/data",
            "-e", "SEALFLOW_MASTER_KEY_FILE=/run/secrets/master",
            "--mount", f"type=bind,src={key},dst=/run/secrets/master,readonly", "sealflow:local",
        )  # fmt: skip
        self.wait(f"{name} healthy", lambda: self.healthy(name), 90)
        uids = self.docker("exec", name, "sh", "-c", "grep ^Uid: /proc/1/status")
        assert uids.split()[1:] == [UID] * 4, f"PID 1 is not uid {UID}: {uids}"
        url = f"http://{self.ip(name)}:8080"
        status, body = self.http(f"{url}/readyz")
        assert status == 200, (status, body)
        logs = self.run(self.docker_bin, "logs", name)
        token = self.root_token(f"{logs.stdout}\n{logs.stderr}")
        src = self.tmp / "one.bin"
        src.write_bytes(os.urandom(MIB))
        self.curl_round_trip(url, token, src, duplex=False)
        self.curl_round_trip(url, token, src, duplex=True)
        probe = (
            "import ssl, subprocess, sealflow.native._sealflow_native as n\n"
            "from sealflow import engine\n"
            "v = n.lib.sf_openssl_version_num()\n"
            "major, minor, patch = v >> 28, (v >> 20) & 0xff, (v >> 4) & 0xff\n"
            "print(f'{major}.{minor}.{patch}', hex(v), ssl.OPENSSL_VERSION, sep='|')\n"
            "print(subprocess.run(['ldd', n.__file__], capture_output=True, text=True).stdout)\n"
            "print({a.value: c for a, c in engine.provider_choice().items()})\n"
        )
        lines = self.docker("exec", name, "python", "-c", probe).splitlines()
        version, number, python_ssl = lines[0].split("|")
        libcrypto = next(line.strip() for line in lines if "libcrypto" in line)
        say(f"    native provider: OpenSSL {version} ({number}); Python's ssl: {python_ssl}")
        say(f"    extension linked to: {libcrypto}")
        say(f"    provider choice: {lines[-1]}")
        assert int(number, 16) >= 0x30200000, f"the image's OpenSSL {version} is older than 3.2"
        assert python_ssl.startswith(f"OpenSSL {version}"), (
            "the extension and Python load different OpenSSLs"
        )
        assert "=> /lib/" in libcrypto or "=> /usr/lib/" in libcrypto, libcrypto
        self.pinned()
        # docker stop: /readyz turns 503 at once, requests are still served while draining, exit 0.
        stop = [self.docker_bin, "stop", "-t", "40", name]
        stopping = subprocess.Popen(stop, stdout=subprocess.DEVNULL)  # noqa: S603
        self.wait(
            "/readyz 503 after docker stop", lambda: self.http(f"{url}/readyz")[0] == 503, 5, 0.05
        )
        self.curl_round_trip(url, token, src, duplex=False)
        assert stopping.wait(60) == 0
        code = self.inspect(name, "{{.State.ExitCode}}")
        assert code == "0", f"exit code {code} after docker stop"
        self.docker("rm", "-v", name)
        self.docker("volume", "rm", "sfci-one-data")

    def pinned(self) -> None:
        """Every distribution in the image's venv is at the version its lock pins."""
        locked: dict[str, str] = {}
        for lock in ("runtime.txt", "build.txt"):
            text = (self.project / "requirements" / lock).read_text()
            for name, version in re.findall(r"^([A-Za-z0-9_.-]+)==(\S+)", text, re.MULTILINE):
                locked[re.sub(r"[-_.]+", "-", name).lower()] = version
        listed = self.docker(
            "run", "--rm", "--entrypoint", "pip", "sealflow:local", "list", "--format", "json"
        )
        installed = {
            re.sub(r"[-_.]+", "-", d["name"]).lower(): d["version"] for d in json.loads(listed)
        }
        # pip is the venv's own (ensurepip), sealflow the project: neither is in a lock.
        unpinned = {
            name: version
            for name, version in installed.items()
            if name not in ("pip", "sealflow") and locked.get(name) != version
        }
        assert not unpinned, f"not at their locked versions in the image: {unpinned}"
        say(f"    {len(installed) - 2} distributions in the image, each at its locked version")

    def make_secrets(self) -> None:
        """Every file secret the compose file names, made as its header comment says: the
        master key, and with a PostgreSQL keystore its password and the URL that carries it.
        Those the replicas read belong to uid 10001 (docs/DEPLOY.md); mode 0600 for all."""
        config = yaml.safe_load(self.compose("--profile", "load", "config"))
        files = {name: Path(spec["file"]) for name, spec in config.get("secrets", {}).items()}
        postgres = config["services"].get("postgres", {}).get("environment", {})
        password = secrets.token_urlsafe(24)
        for name, path in sorted(files.items(), key=lambda item: "url" in item[0]):
            if "master_key" in name:
                self.master_key(path)
            elif name == "postgres_password":
                path.write_text(password + "\n")
                path.chmod(0o600)  # read by the postgres entry point as root
            elif "keystore_url" in name:
                user, db = postgres.get("POSTGRES_USER", "postgres"), postgres.get("POSTGRES_DB")
                path.write_text(f"postgresql://{user}:{password}@postgres/{db or user}\n")
                path.chmod(0o600)
                os.chown(path, int(UID), int(UID))
            else:
                raise AssertionError(f"no recipe here for the secret {name} ({path})")
            self.made.append(path)
        say(f"    secrets made: {', '.join(sorted(files))}")

    def stack_up(self) -> None:
        self.make_secrets()
        self.compose("up", "-d")
        replicas = self.replicas()
        assert len(replicas) == REPLICAS, f"{len(replicas)} replicas, not {REPLICAS}"
        for c in replicas:
            self.wait(f"replica {c[:12]} healthy", lambda c=c: self.healthy(c), 90)  # type: ignore[misc]
        logs = self.compose("logs", "--no-color", "sealflow")
        self.token = self.root_token(logs)
        self.url = "http://" + self.compose("port", "balancer", "8080")
        self.wait("balancer answers /readyz", lambda: self.http(f"{self.url}/readyz")[0] == 200, 30)

    def replicas(self) -> list[str]:
        return self.compose("ps", "-q", "sealflow").split()

    def round_trips(self) -> None:
        for size in (KIB, 64 * MIB, 256 * MIB):
            data = os.urandom(size)
            src = self.tmp / "plain.bin"
            src.write_bytes(data)
            for duplex in (False, True):
                start = time.monotonic()
                with Client(self.url, self.token, duplex=duplex, timeout=300) as client:
                    modes: tuple[Literal["single", "stream"], ...] = ("stream",)
                    if size <= 64 * MIB:
                        modes = ("single", "stream")
                    for mode in modes:
                        sealed = client.encrypt("default", data, mode=mode)
                        assert client.decrypt(sealed) == data, f"client {mode}: plaintext differs"
                        del sealed
                self.curl_round_trip(self.url, self.token, src, duplex=duplex)
                transport = "full duplex" if duplex else "request-then-response"
                say(
                    f"    {size // KIB:>7} KiB, {transport}: client ({'+'.join(modes)}) "
                    "and curl round trips "
                    f"({time.monotonic() - start:.1f} s)"
                )
            src.unlink()

    def rotation(self) -> None:
        ips = [self.ip(c) for c in self.replicas()]

        def latest(ip: str) -> int:
            status, body = self.http(f"http://{ip}:8080/v1/keys/default", token=self.token)
            assert status == 200, (status, body)
            return int(json.loads(body)["latest"])

        before = [latest(ip) for ip in ips]
        assert len(set(before)) == 1, before
        status, body = self.http(
            f"http://{ips[0]}:8080/v1/keys/default/rotate", token=self.token, data=b""
        )
        assert status == 200, (status, body)
        self.wait(
            "every replica sees the rotation",
            lambda: all(latest(ip) == before[0] + 1 for ip in ips),
            5,
            0.05,
        )
        say(f"    rotated on {ips[0]}: version {before[0]} -> {before[0] + 1} on {', '.join(ips)}")
        # With a PostgreSQL keystore in the file, every replica holds a connection to it.
        services = yaml.safe_load(self.compose("config"))["services"]
        if "postgres" in services:
            db = services["postgres"].get("environment", {})
            user = db.get("POSTGRES_USER", "postgres")
            query = (
                "select distinct host(client_addr) from pg_stat_activity"
                " where client_addr is not null"
            )
            clients = self.compose(
                "exec", "-T", "postgres", "psql", "-U", user, "-d", db.get("POSTGRES_DB", user),
                "-Atc", query,
            ).split()  # fmt: skip
            assert set(ips) <= set(clients), f"replicas {ips}, PostgreSQL's clients {clients}"
            say(f"    every replica is connected to the postgres service ({len(clients)} clients)")

    def prometheus(self) -> None:
        url = "http://" + self.compose("port", "prometheus", "9090")
        ips = {self.ip(c) for c in self.replicas()}
        seen: list[Any] = []

        def all_up() -> bool:
            status, body = self.http(f"{url}/api/v1/targets")
            if status != 200:
                return False
            targets = [
                t
                for t in json.loads(body)["data"]["activeTargets"]
                if t["labels"]["job"] == "sealflow"
            ]
            seen[:] = targets
            return {
                t["labels"]["instance"].rsplit(":", 1)[0] for t in targets if t["health"] == "up"
            } == ips

        self.wait(f"Prometheus scrapes every replica ({sorted(ips)})", all_up, 90, 1)
        say(f"    targets up: {sorted(t['labels']['instance'] for t in seen)}")
        # The alerting rules of deploy/prometheus/alerts.yml, mounted beside prometheus.yml.
        status, body = self.http(f"{url}/api/v1/rules")
        assert status == 200, f"GET /api/v1/rules: {status}"
        rules = {r["name"] for g in json.loads(body)["data"]["groups"] for r in g["rules"]}
        assert "SealflowReplicaDown" in rules, f"the alerting rules are not loaded: {rules}"
        say(f"    alerting rules loaded: {len(rules)}")

    def stop_during_traffic(self) -> None:
        """Traffic through the balancer while one replica stops: no failure, no wait > 1 s."""
        victim = self.replicas()[-1]
        done = threading.Event()
        lock = threading.Lock()
        times: list[float] = []
        failures: list[str] = []
        data = os.urandom(16 * KIB)

        def traffic() -> None:
            with Client(self.url, self.token, duplex=False, timeout=30) as client:
                while not done.is_set():
                    start = time.monotonic()
                    try:
                        ok = client.decrypt(client.encrypt("default", data, mode="single")) == data
                        error = "" if ok else "plaintext differs"
                    except Exception as e:
                        error = f"{type(e).__name__}: {e}"
                    with lock:
                        times.append(time.monotonic() - start)
                        if error:
                            failures.append(error)

        threads = [threading.Thread(target=traffic) for _ in range(4)]
        for t in threads:
            t.start()
        time.sleep(2)
        start = time.monotonic()
        self.docker("stop", "-t", "40", victim)
        stopped = time.monotonic() - start
        time.sleep(3)
        done.set()
        for t in threads:
            t.join()
        code = self.inspect(victim, "{{.State.ExitCode}}")
        slowest = max(times)
        say(
            f"    {len(times)} round trips, replica {victim[:12]} stopped in {stopped:.1f} s "
            f"(exit {code}); "
            f"{len(failures)} failed, slowest {slowest * 1000:.0f} ms"
        )
        assert not failures, failures[:5]
        assert slowest <= 1.0, f"a round trip waited {slowest:.2f} s"
        assert code == "0", code
        assert len(times) > 100, len(times)

    def load_profile(self) -> None:
        env = {**self.env, "SEALFLOW_TOKEN": self.token}
        self.compose("--profile", "load", "up", "-d", env=env)
        replicas = self.replicas()
        assert len(replicas) == REPLICAS, (
            f"--profile load up left {len(replicas)} replicas, not {REPLICAS}"
        )
        for c in replicas:
            self.wait(f"replica {c[:12]} healthy", lambda c=c: self.healthy(c), 90)  # type: ignore[misc]
        workers = self.compose("--profile", "load", "ps", "-q", "locust-worker", env=env).split()
        assert len(workers) == 2, workers
        locust = "http://" + self.compose(
            "--profile", "load", "port", "locust-master", "8089", env=env
        )

        last: list[object] = []

        def stats() -> dict[str, Any]:
            status, body = self.http(f"{locust}/stats/requests")
            assert status == 200, (status, body[:300])
            loaded: dict[str, Any] = json.loads(body)
            return loaded

        def workers_ready() -> bool:
            try:
                report = stats()
            except (OSError, AssertionError) as e:
                last[:] = [e]
                return False
            last[:] = [{k: v for k, v in report.items() if k != "stats"}]
            return len(report.get("workers", [])) == 2

        try:
            self.wait(
                "the Locust master has its 2 workers",
                workers_ready,
                60,
                logs=("locust-master", "locust-worker"),
            )
        except AssertionError as e:
            raise AssertionError(f"{e}\nlast seen: {last}") from None
        form = urllib.parse.urlencode(
            {"user_count": 8, "spawn_rate": 8, "host": "http://balancer:8080"}
        )
        status, body = self.http(f"{locust}/swarm", data=form.encode())
        assert status == 200, body
        assert json.loads(body).get("success"), body
        time.sleep(30)
        final = stats()
        self.http(f"{locust}/stop")
        total = next(s for s in final["stats"] if s["name"] == "Aggregated")
        say(
            f"    Locust 30 s, 8 users on 2 workers: {total['num_requests']} requests, "
            f"{total['num_failures']} failures, {final['total_rps']:.0f} req/s"
        )
        assert total["num_requests"] > 100, total
        assert total["num_failures"] == 0, final["errors"][:5]
        after = self.replicas()
        assert len(after) == REPLICAS, f"{len(after)} replicas after the Locust run"
        running = [self.inspect(c, "{{.State.Running}}") for c in after]
        assert running == ["true"] * REPLICAS, running

    def stack_down(self) -> None:
        self.compose("--profile", "load", "down", "-v", env={**self.env, "SEALFLOW_TOKEN": ""})
        for path in self.made:
            path.unlink()

    def benchmark(self) -> None:
        out = self.docker(
            "run", "--rm", "--entrypoint", "python", "-w", "/bench", "-e", "PYTHONPATH=/bench",
            "-v", f"{self.benchmarks}:/bench/benchmarks:ro", "sealflow:local",
            "-m", "benchmarks.engine", "by_provider",
        )  # fmt: skip
        print(out, flush=True)
        assert "| native |" in out, out
        assert "| cryptography |" in out, out

    def steps(self) -> list[tuple[str, str, Callable[[], None]]]:
        return [
            ("postgres", "the postgres stand-in: initdb from POSTGRES_*, password auth, "
             "pg_isready, data kept", self.postgres),
            ("one", "one container: healthy, uid 10001, /readyz, curl round trips, "
             "OpenSSL >= 3.2, locked versions, docker stop drains, exit 0", self.one_container),
            ("up", f"the stack up: {REPLICAS} replicas healthy behind the balancer, "
             "Prometheus", self.stack_up),
            ("round-trips", "round trips through the balancer: 1 KiB, 64 MiB, 256 MiB, both "
             "transports, client library and curl", self.round_trips),
            ("rotation", "a rotation on one replica is seen by the others", self.rotation),
            ("prometheus", "Prometheus scrapes every replica (targets API)", self.prometheus),
            ("stop", "a replica stops during traffic: no request fails or waits more than "
             "1 s", self.stop_during_traffic),
            ("load", "--profile load: Locust 30 s through the balancer, zero failures, "
             "replica count kept", self.load_profile),
            ("down", "the stack down (down -v)", self.stack_down),
            ("benchmark", "benchmark inside the image: AES-256-GCM, native provider on the "
             "image's OpenSSL vs cryptography, 1 and 2 threads", self.benchmark),
        ]  # fmt: skip

    def all(self, only: set[str]) -> None:
        """Every step in order; with `only`, those (and "up" before any step of the stack)."""
        chosen = [s for s in self.steps() if not only or s[0] in only]
        stack = {"round-trips", "rotation", "prometheus", "stop", "load", "down"}
        if only & stack and "up" not in only:
            chosen.insert(0, next(s for s in self.steps() if s[0] == "up"))
        try:
            for _, title, check in chosen:
                with step(title):
                    check()
        finally:
            shutil.rmtree(self.tmp, ignore_errors=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--docker", default="docker")
    parser.add_argument("--project", required=True)
    parser.add_argument("--benchmarks", required=True)
    parser.add_argument("--postgres-image", required=True)
    parser.add_argument("--only", default="", help="comma-separated step names (development)")
    args = parser.parse_args()
    try:
        Checks(args).all({name for name in args.only.split(",") if name})
    except AssertionError as e:
        print(f"CHECK FAILED: {e}", file=sys.stderr, flush=True)
        sys.exit(1)


if __name__ == "__main__":
    main()
