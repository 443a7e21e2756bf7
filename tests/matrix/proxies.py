"""HAProxy and nginx from Debian's packages, run with the configuration files compose ships.

The tests run ``deploy/haproxy.cfg`` and ``deploy/nginx.conf`` themselves, not copies: each is
read and only its addresses are replaced (Docker's DNS by ``dns.StubDns``, the replicas' port
by the test server's, the listening port by a free loopback port), each replacement checked
to match exactly once, so a change to a shipped file is a change to what is tested. nginx gets
the main context its image provides around ``conf.d/`` (pid, logs, temp paths), here under
the proxy's own folder.

The proxies are the tests' children: in a new session (so no worker outlives the test run),
as ``nobody`` when the tests run as root, on loopback ports, writing only under a temporary
folder of their own; stopped and the folder removed after.
"""

from __future__ import annotations

import contextlib
import os
import pwd
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx

DEPLOY = Path(__file__).resolve().parents[2] / "deploy"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def substitute(text: str, replacements: Mapping[str, str]) -> str:
    for old, new in replacements.items():
        assert text.count(old) == 1, f"expected {old!r} once in the shipped configuration"
        text = text.replace(old, new)
    return text


def haproxy_config(dns_port: int, upstream_port: int, port: int) -> str:
    return substitute(
        (DEPLOY / "haproxy.cfg").read_text(),
        {
            "127.0.0.11:53": f"127.0.0.1:{dns_port}",
            "sealflow:8080": f"sealflow:{upstream_port}",
            "bind :8080": f"bind 127.0.0.1:{port}",
        },
    )


def nginx_site(dns_port: int, upstream_port: int, port: int, text: str | None = None) -> str:
    return substitute(
        (DEPLOY / "nginx.conf").read_text() if text is None else text,
        {
            "resolver 127.0.0.11 ": f"resolver 127.0.0.1:{dns_port} ",
            "http://sealflow:8080": f"http://sealflow:{upstream_port}",
            "listen 8080;": f"listen 127.0.0.1:{port};",
        },
    )


# The nginx image's /etc/nginx/nginx.conf includes conf.d/*.conf in its http block; this is
# that main context with every path under the proxy's folder (nginx -p).
NGINX_MAIN = """\
pid nginx.pid;
error_log logs/error.log warn;
worker_processes 1;
events {
    worker_connections 1024;
}
http {
    access_log logs/access.log;
    client_body_temp_path temp/client_body;
    proxy_temp_path temp/proxy;
    fastcgi_temp_path temp/fastcgi;
    uwsgi_temp_path temp/uwsgi;
    scgi_temp_path temp/scgi;
    include sealflow.conf;
}
"""


@dataclass
class Proxy:
    name: str
    port: int
    folder: Path
    proc: subprocess.Popen[bytes]

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def log(self) -> Path:
        return self.folder / "logs" / "output.log"

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        # Its own session: whatever it forked (nginx's worker) goes too.
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.proc.pid, signal.SIGKILL)
        shutil.rmtree(self.folder, ignore_errors=True)


def _unprivileged(folder: Path) -> dict[str, Any]:
    """Popen arguments that run a proxy as nobody when the tests run as root."""
    if os.geteuid() != 0:
        return {}
    nobody = pwd.getpwnam("nobody")
    for path in [folder, *folder.rglob("*")]:
        os.chown(path, nobody.pw_uid, nobody.pw_gid)
    return {"user": nobody.pw_uid, "group": nobody.pw_gid, "extra_groups": []}


def _start(name: str, command: list[str], folder: Path, port: int) -> Proxy:
    executable = shutil.which(command[0], path=os.defpath + ":/usr/sbin:/sbin")
    assert executable, f"{command[0]} is missing: apt-get install {name} (see .ci/run)"
    (folder / "logs").mkdir(exist_ok=True)
    (folder / "logs" / "output.log").touch()
    settings = _unprivileged(folder)
    with (folder / "logs" / "output.log").open("ab") as log:
        proc = subprocess.Popen(  # noqa: S603
            [executable, *command[1:]],
            cwd=folder,
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            **settings,
        )
    proxy = Proxy(name, port, folder, proc)
    # Ready once a replica answers through it: HAProxy has resolved "sealflow" and its
    # health check passed, nginx resolves on the first request.
    deadline = time.monotonic() + 60
    while True:
        if proc.poll() is not None:
            output = proxy.log.read_text()
            proxy.stop()
            raise RuntimeError(f"{name} exited {proc.returncode}: {output[-2000:]}")
        try:
            if httpx.get(proxy.url + "/readyz", timeout=5).status_code == 200:
                return proxy
        except httpx.TransportError:
            pass
        if time.monotonic() > deadline:
            output = proxy.log.read_text()
            proxy.stop()
            raise RuntimeError(f"{name} not ready: {output[-2000:]}")
        time.sleep(0.1)


def _folder(name: str) -> Path:
    # Not under pytest's tmp_path: that is private to the user running the tests, and the
    # proxy may run as nobody.
    return Path(tempfile.mkdtemp(prefix=f"sealflow-{name}-"))


def start_haproxy(dns_port: int, upstream_port: int) -> Proxy:
    folder, port = _folder("haproxy"), free_port()
    (folder / "haproxy.cfg").write_text(haproxy_config(dns_port, upstream_port, port))
    # -db: stay in the foreground (no daemon, no pid file); logs go to stdout.
    return _start("haproxy", ["haproxy", "-db", "-f", "haproxy.cfg"], folder, port)


def start_nginx(dns_port: int, upstream_port: int, site: str | None = None) -> Proxy:
    """nginx with deploy/nginx.conf, or with ``site``: that file as a test changed it."""
    folder, port = _folder("nginx"), free_port()
    (folder / "sealflow.conf").write_text(nginx_site(dns_port, upstream_port, port, site))
    (folder / "nginx.conf").write_text(NGINX_MAIN)
    (folder / "temp").mkdir()
    command = ["nginx", "-p", f"{folder}/", "-c", "nginx.conf", "-e", "logs/error.log"]
    return _start("nginx", [*command, "-g", "daemon off;"], folder, port)
