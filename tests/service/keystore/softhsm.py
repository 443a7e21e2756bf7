"""A SoftHSM2 token of a test's own (Debian's softhsm2): its configuration and token directory
in a temporary directory, initialised by softhsm2-util, and the key made by
``sealflow keystore init-master``."""

from __future__ import annotations

import os
import subprocess
from dataclasses import dataclass
from pathlib import Path

from tests.service.conftest import SEALFLOW

LIBRARY = Path("/usr/lib/softhsm/libsofthsm2.so")
PIN = "20261203"


@dataclass(frozen=True)
class Token:
    conf: Path
    pin_file: Path
    label: str = "sealflow-test"
    key_label: str = "sealflow-master"

    def settings(self, **more: object) -> dict[str, object]:
        """The pkcs11 provider's settings (SEALFLOW_* names, lower case, without the prefix)."""
        return {
            "master_key_provider": "pkcs11",
            "master_key_pkcs11_library": LIBRARY,
            "master_key_pkcs11_token_label": self.label,
            "master_key_pkcs11_key_label": self.key_label,
            "master_key_pkcs11_pin_file": self.pin_file,
            **more,
        }

    def env(self, **more: object) -> dict[str, str]:
        settings = self.settings(**more)
        return {f"SEALFLOW_{k.upper()}": str(v) for k, v in settings.items()}

    def sealflow(self, *args: str, **more: object) -> subprocess.CompletedProcess[str]:
        env = {**os.environ, **self.env(**more)}
        return subprocess.run(  # noqa: S603
            [SEALFLOW, *args], capture_output=True, text=True, env=env, timeout=120, check=False
        )


def make_token(folder: Path) -> Token:
    """A new token with the key on it; SOFTHSM2_CONF must name ``folder / softhsm2.conf``."""
    tokens = folder / "tokens"
    tokens.mkdir(parents=True)
    conf = folder / "softhsm2.conf"
    conf.write_text(
        f"directories.tokendir = {tokens}\nobjectstore.backend = file\nlog.level = ERROR\n"
    )
    assert os.environ.get("SOFTHSM2_CONF") == str(conf)
    pin_file = folder / "pin"
    pin_file.write_text(PIN + "\n")
    pin_file.chmod(0o600)
    token = Token(conf, pin_file)
    subprocess.run(  # noqa: S603
        [
            "/usr/bin/softhsm2-util",
            "--init-token",
            "--free",
            "--label",
            token.label,
            "--pin",
            PIN,
            "--so-pin",
            "5678",
        ],
        check=True,
        capture_output=True,
    )
    made = token.sealflow("keystore", "init-master", "--data-dir", str(folder / "unused"))
    assert made.returncode == 0, made.stderr
    return token
