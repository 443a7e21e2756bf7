"""``sealflow migrate from-transit``: move keys from a Vault or OpenBao Transit engine into
sealflow with their version numbers, so every ciphertext made there decrypts here unchanged.

Per key: read it on the source; import sealflow's wrapping key there once (a temporary RSA
public key) and have the source ``byok-export`` each version to it (or, without byok-export,
export it and wrap it here); write the key whole on sealflow in one call (versions below the
source's minimum decryption version as retired placeholders); then prove it by decrypting here
a probe the source encrypted under each version, removing the key again if that fails. The
temporary key is deleted from the source at the end. docs/TRANSIT.md, "Migrating from Vault or
OpenBao". No material or token is ever printed.
"""

from __future__ import annotations

import argparse
import base64
import os
import secrets
import sys
from dataclasses import dataclass
from typing import Any

from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import padding, rsa
from cryptography.hazmat.primitives.keywrap import aes_key_wrap_with_padding

from sealflow.service.client import Client, KeyNotFound, SealflowError

from ._connect import DEFAULT_URL, one_line, open_client
from ._errors import ClientError
from ._transit_source import SourceError, TransitSource

# Transit's symmetric types that sealflow holds, and sealflow's name for each.
TYPES = {
    "aes128-gcm96": "aes-128-gcm",
    "aes256-gcm96": "aes-256-gcm",
    "chacha20-poly1305": "chacha20-poly1305",
}


class _Refused(Exception):
    """The key is left out; ``result`` says why (skipped: nothing was tried)."""

    def __init__(self, result: str) -> None:
        super().__init__(result)
        self.result = result


@dataclass
class Row:
    key: str
    type: str = "-"
    versions: str = "-"
    min_decryption: str = "-"
    result: str = ""
    ok: bool = False


class Migration:
    """One run: the source, sealflow, and the temporary wrapping key on the source."""

    def __init__(self, source: TransitSource, client: Client, mount: str) -> None:
        self.source, self.client, self.mount = source, client, mount
        self._pem: str | None = None
        self.temporary: str | None = None  # the wrapping key's name on the source, once there
        self.local = False  # no byok-export on the source: export and wrap here

    def key(self, name: str) -> Row:
        row = Row(name)
        try:
            info = self.source.key(name)
        except SourceError as e:
            row.result = f"failed: cannot read it on the source ({e})"
            return row
        row.type = str(info.get("type"))
        latest, least = int(info["latest_version"]), int(info["min_decryption_version"])
        row.versions, row.min_decryption = f"1-{latest}", str(least)
        try:
            self._check(name, info)
            ciphertexts: list[str | None] = [None] * (least - 1)  # retired placeholders
            ciphertexts += [self._wrapped(name, v) for v in range(least, latest + 1)]
            self.client.import_key(
                name,
                ciphertexts,
                algorithm=TYPES[row.type],
                min_decryption_version=least,
                min_encryption_version=int(info.get("min_encryption_version") or 0),
                deletion_allowed=bool(info.get("deletion_allowed")),
                exportable=True,  # as on the source, where byok-export needs it
                allow_rotation=True,  # a key sealflow rotates, as the source did
                auto_rotate_period=float(info.get("auto_rotate_period") or 0) or None,
            )
        except _Refused as e:
            row.result = e.result
            return row
        except (SourceError, SealflowError) as e:
            row.result = f"failed: nothing written on sealflow ({one_line(str(e))})"
            return row
        row.result, row.ok = self._prove(name, info, least, latest)
        return row

    def _check(self, name: str, info: dict[str, Any]) -> None:
        kind = info.get("type")
        if kind not in TYPES:
            raise _Refused(f"skipped: type {kind} is not supported")
        if info.get("derived") or info.get("convergent_encryption"):
            raise _Refused("skipped: derived keys are not supported")
        if not info.get("exportable"):
            raise _Refused("skipped: not exportable on the source (byok-export needs it)")
        try:
            self.client.get_key(name)
        except KeyNotFound:
            return
        raise _Refused("failed: a key of this name exists on sealflow (left untouched)")

    def _wrapped(self, name: str, version: int) -> str:
        """The version wrapped for sealflow's wrapping key, as an import ``ciphertext``."""
        if self._pem is None:
            pem = self.client.wrapping_key()
            self._place_wrapping_key(pem)  # tried again for the next key if this one fails
            self._pem = pem
        if self.temporary is not None and not self.local:
            try:
                return self.source.byok_export(self.temporary, name, version)
            except SourceError as e:
                if e.status != 404:
                    raise
                self._fall_back(f"byok-export is missing ({e})")
        return wrap(self._pem, self.source.export_material(name, version))

    def _place_wrapping_key(self, pem: str) -> None:
        name = f"sealflow-migrate-{secrets.token_hex(4)}"
        try:
            self.source.import_public_key(name, pem)
        except SourceError as e:
            if e.status is None or e.status >= 500:
                raise
            self._fall_back(f"it refused sealflow's wrapping key ({e})")
            return
        self.temporary = name

    def _fall_back(self, why: str) -> None:
        self.local = True
        _say(
            f"the source has no usable byok-export: {why}; exporting each version and wrapping "
            "it here instead (the material passes through this process)"
        )

    def _prove(self, name: str, info: dict[str, Any], least: int, latest: int) -> tuple[str, bool]:
        """Decrypt here a probe the source encrypted under each version it encrypts with;
        remove the key on failure (whole or nothing)."""
        lowest = max(least, int(info.get("min_encryption_version") or 0))
        how = "exported and wrapped locally" if self.local else "byok-export"
        try:
            for version in range(lowest, latest + 1):
                probe = os.urandom(16)
                ciphertext = self.source.encrypt(name, probe, version)
                if self.client.transit_decrypt(name, ciphertext, mount=self.mount) != probe:
                    raise SealflowError(f"version {version} decrypted to something else")
        except (SourceError, SealflowError) as e:
            return self._remove(name, f"proof failed ({one_line(str(e))})"), False
        unproven = "" if lowest == least else f", versions below {lowest} not probed"
        return f"imported ({how}{unproven})", True

    def _remove(self, name: str, why: str) -> str:
        try:
            self.client.update_key(name, deletion_allowed=True)
            self.client.delete_key(name)
        except SealflowError as e:
            return f"failed: {why}; could not remove it from sealflow ({one_line(str(e))})"
        return f"failed: {why}; removed from sealflow"

    def clean_up(self) -> bool:
        """Delete the temporary wrapping key from the source; False (said) if it refuses."""
        if self.temporary is None:
            return True
        try:
            self.source.delete_key(self.temporary)
        except SourceError as e:
            _say(
                f"could not delete the temporary key {self.temporary} from the source ({e}); "
                "delete it there by hand (it holds only sealflow's public wrapping key)"
            )
            return False
        self.temporary = None
        return True


def wrap(public_pem: str, material: bytes) -> str:
    """Transit's import ``ciphertext`` of ``material`` for ``public_pem``: RSA-OAEP (SHA-256)
    of an ephemeral AES-256 key, then AES-KWP of the material under it (what byok-export does)."""
    public = serialization.load_pem_public_key(public_pem.encode())
    if not isinstance(public, rsa.RSAPublicKey):
        raise SealflowError("sealflow's wrapping key is not an RSA key")
    ephemeral = os.urandom(32)
    oaep = padding.OAEP(mgf=padding.MGF1(hashes.SHA256()), algorithm=hashes.SHA256(), label=None)
    wrapped = public.encrypt(ephemeral, oaep) + aes_key_wrap_with_padding(ephemeral, material)
    return base64.b64encode(wrapped).decode()


def _say(line: str) -> None:
    print(f"sealflow: {line}", file=sys.stderr, flush=True)


def _table(rows: list[Row]) -> None:
    header = ("KEY", "TYPE", "VERSIONS", "MIN DECRYPTION", "RESULT")
    lines = [header, *((r.key, r.type, r.versions, r.min_decryption, r.result) for r in rows)]
    widths = [max(len(line[i]) for line in lines) for i in range(4)]
    for line in lines:
        print(
            "  ".join(cell.ljust(width) for cell, width in zip(line, widths, strict=False)), line[4]
        )


def _token(path: str) -> str:
    try:
        with open(path, encoding="utf-8") as f:
            token = f.read().strip()
    except OSError as e:
        raise ClientError(f"cannot read the token file {path!r}: {e.strerror}", 2) from None
    if not token or any(not 0x21 <= ord(c) <= 0x7E for c in token):
        raise ClientError(f"the token file {path!r} holds no usable token", 2)
    return token


def _from_transit(args: argparse.Namespace) -> int:
    try:
        source = TransitSource(args.addr, _token(args.token_file), args.mount, args.ca_cert)
        with open_client(args) as client:
            migration = Migration(source, client, args.to_mount)
            try:
                names = source.list_keys() if args.all else _names(args.keys)
                rows = []
                for name in names:
                    _say(f"migrating {name} ...")
                    rows.append(row := migration.key(name))
                    _say(f"{name}: {row.result}")
            finally:
                cleaned = migration.clean_up()
    except ClientError as e:
        print(f"sealflow: {e}", file=sys.stderr)
        return e.code
    except (SourceError, SealflowError) as e:
        print(f"sealflow: migrate failed: {one_line(str(e))}", file=sys.stderr)
        return 1
    _table(rows)
    return 0 if cleaned and all(r.ok for r in rows) else 1


def _names(text: str) -> list[str]:
    names = [n.strip() for n in text.split(",") if n.strip()]
    if not names:
        raise ClientError("--keys names no key", 2)
    return list(dict.fromkeys(names))


def add_commands(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Register ``migrate from-transit``."""
    migrate = commands.add_parser("migrate", help="move keys into sealflow from another engine")
    kinds = migrate.add_subparsers(dest="kind", required=True)
    p = kinds.add_parser(
        "from-transit",
        help="move keys from a Vault or OpenBao Transit engine, version numbers kept",
        description="Move keys from a Vault or OpenBao Transit engine into the sealflow service "
        "at --url, with the same names, versions, minimum versions and deletion flag, so that "
        "ciphertexts made there decrypt here unchanged. Each key must be exportable on the "
        "source. The source token needs read on the keys, byok-export (or export, as a "
        "fallback), encrypt (for the proof), and create, update and delete on "
        "keys/sealflow-migrate-* and its config (a temporary "
        "key holding sealflow's public wrapping key, deleted at the end). SEALFLOW_TOKEN needs "
        "admin, and export and decrypt on each key. Exits non-zero if any key was skipped or "
        "failed; a key is written whole or not at all.",
    )
    p.add_argument(
        "--addr", required=True, metavar="URL", help="the source, e.g. https://vault:8200"
    )
    p.add_argument(
        "--token-file", required=True, metavar="FILE", help="file holding the source's token"
    )
    p.add_argument(
        "--mount", default="transit", help="the source's Transit mount (default transit)"
    )
    p.add_argument("--ca-cert", metavar="FILE", help="CA bundle for the source's TLS certificate")
    which = p.add_mutually_exclusive_group(required=True)
    which.add_argument("--keys", metavar="A,B", help="the keys to move, comma-separated")
    which.add_argument("--all", action="store_true", help="every key of the source's mount")
    p.add_argument("--url", help=f"sealflow's URL (default: $SEALFLOW_URL or {DEFAULT_URL})")
    p.add_argument(
        "--to-mount",
        default="transit",
        metavar="MOUNT",
        help="sealflow's Transit mount, for the proof (default transit)",
    )
    p.set_defaults(func=_from_transit)
