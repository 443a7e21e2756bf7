"""AppRole roles and secret ids, written once for every store (``Writes`` inherits this): a
role grants scopes and token lifetimes to a login with its role id and one of its secret ids;
the store checks the secret id (digest, role, expiry, uses, CIDR bounds) and counts its use
in one transaction. The token itself is made by the caller (``create_token``).

Every change is told to ``on_change`` (the audit trail) by role name and secret-id accessor,
never the secret id.
"""

from __future__ import annotations

import hmac
import json
import re
import secrets
import time
import uuid
from collections.abc import Mapping
from typing import Any

from ._approle_api import RoleInfo, SecretIdInfo
from ._approle_rows import (
    AppRoleTables,
    inside,
    networks,
    role_info,
    secret_id_info,
    within,
)
from ._base import valid_scope
from ._rows import digest
from ._store_access import StoreAccess
from .errors import InvalidRequest, LoginRefused, RoleNotFound

ROLE_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,127}")
INVALID = "invalid role or secret ID"  # Vault's one answer for a role id or secret id it refuses
# What a role has until told otherwise (Vault's defaults).
_DEFAULTS: dict[str, Any] = {
    "token_policies": (),
    "token_ttl": 0,
    "token_max_ttl": 0,
    "token_num_uses": 0,
    "secret_id_ttl": 0,
    "secret_id_num_uses": 0,
    "secret_id_bound_cidrs": (),
    "token_bound_cidrs": (),
    "bind_secret_id": True,
}
ROLE_FIELDS = frozenset(_DEFAULTS)


class AppRoles(StoreAccess):
    _approle: AppRoleTables

    # -- roles

    def write_role(self, name: str, fields: Mapping[str, Any]) -> RoleInfo:
        """Create the role, or change the fields given of an existing one (Vault's update)."""
        if not ROLE_NAME.fullmatch(name):
            raise InvalidRequest(f"invalid role name {name!r}")
        unknown = set(fields) - ROLE_FIELDS
        if unknown:
            raise InvalidRequest(f"unknown role fields {sorted(unknown)}")
        tables = self._approle
        with self._transaction() as db:
            old = tables.role_row(db, tables.role, name)
            current = _DEFAULTS if old is None else _as_fields(role_info(old))
            merged = {**current, **fields}
            row = _role_row(
                name,
                str(uuid.uuid4()) if old is None else old[1],
                merged,
                time.time() if old is None else old[11],
            )
            tables.write_role(db, row)
        self._changed("approle_role_create" if old is None else "approle_role_update", role=name)
        return role_info(row)

    def get_role(self, name: str) -> RoleInfo:
        with self._connection() as db:
            row = self._approle.role_row(db, self._approle.role, name)
        if row is None:
            raise RoleNotFound(f'role "{name}" does not exist')
        return role_info(row)

    def list_roles(self) -> list[RoleInfo]:
        with self._connection() as db:
            return self._approle.all_roles(db)

    def delete_role(self, name: str) -> bool:
        """Delete the role and every secret id of it; False if there was none."""
        tables = self._approle
        with self._transaction() as db:
            if db.execute(tables.role, (name,)).fetchone() is None:
                return False
            tables.drop_role(db, name)
        self._changed("approle_role_delete", role=name)
        return True

    def set_role_id(self, name: str, role_id: str) -> RoleInfo:
        if (
            not isinstance(role_id, str)
            or not 1 <= len(role_id) <= 256
            or not role_id.isprintable()
        ):
            raise InvalidRequest("a role id must be 1 to 256 printable characters")
        tables = self._approle
        with self._transaction() as db:
            old = tables.role_row(db, tables.role, name)
            if old is None:
                raise RoleNotFound(f'role "{name}" does not exist')
            other = db.execute(tables.role_by_id, (role_id,)).fetchone()
            if other is not None and other[0] != name:
                raise InvalidRequest("role_id already in use")
            row = (old[0], role_id, *old[2:])
            tables.write_role(db, row)
        self._changed("approle_role_id_write", role=name)
        return role_info(row)

    # -- secret ids

    def create_secret_id(
        self,
        name: str,
        *,
        metadata: Mapping[str, str] | None = None,
        cidrs: list[str] | None = None,
        ttl: int | None = None,
        num_uses: int | None = None,
        secret: str | None = None,
    ) -> tuple[SecretIdInfo, str]:
        """A new secret id of the role, and its secret (shown once, stored as a digest)."""
        meta = dict(metadata or {})
        if not all(isinstance(k, str) and isinstance(v, str) for k, v in meta.items()):
            raise InvalidRequest("metadata must be a JSON object of strings")
        try:
            blocks = networks(cidrs or [])
        except ValueError as exc:
            raise InvalidRequest(f"invalid cidr_list: {exc}") from None
        tables = self._approle
        secret = secret if secret is not None else str(uuid.uuid4())
        with self._transaction() as db:
            old = tables.role_row(db, tables.role, name)
            if old is None:
                raise RoleNotFound(f'role "{name}" does not exist')
            role = role_info(old)
            if not inside(blocks, role.secret_id_bound_cidrs):
                raise InvalidRequest(
                    "the CIDR blocks of the secret ID must lie within the role's"
                    f" {list(role.secret_id_bound_cidrs)}"
                )
            life = role.secret_id_ttl if ttl is None else min(ttl, role.secret_id_ttl or ttl)
            uses = role.secret_id_num_uses if num_uses is None else num_uses
            if life < 0 or uses < 0:
                raise InvalidRequest("ttl and num_uses cannot be negative")
            now = time.time()
            row = (
                "sid_" + secrets.token_hex(8),
                name,
                role.created_at,
                digest(secret),
                now,
                now + life if life else None,
                uses,
                0,
                ",".join(blocks or role.secret_id_bound_cidrs),
                json.dumps(meta, sort_keys=True),
            )
            if db.execute(tables.digest_taken, (row[3],)).fetchone() is not None:
                raise InvalidRequest("SecretID is already registered")  # a custom one, twice
            tables.insert_secret(db, row)
            db.execute(tables.sweep, (now,))
        info = secret_id_info(row)
        self._changed("approle_secret_id_create", role=name, secret_id_accessor=info.accessor)
        return info, secret

    def lookup_secret_id(
        self, name: str, secret: str | None = None, accessor: str = ""
    ) -> SecretIdInfo | None:
        """The secret id named by its secret or its accessor; None if there is none (or it has
        expired)."""
        tables = self._approle
        with self._connection() as db:
            role = tables.role_row(db, tables.role, name)
            if role is None:
                raise RoleNotFound(f'role "{name}" does not exist')
            statement, key = (
                (tables.secret_id, digest(secret))
                if secret is not None
                else (tables.secret_id_by_accessor, accessor)
            )
            row = tables.secret_row(db, role_info(role), statement, key)
        if row is None:
            return None
        info = secret_id_info(row)
        return None if _expired(info, time.time()) else info

    def list_secret_ids(self, name: str) -> list[SecretIdInfo]:
        role = self.get_role(name)
        with self._connection() as db:
            stored = db.execute(self._approle.secret_ids, (name,)).fetchall()
        return [secret_id_info(s[:-1]) for s in stored if s[2] == role.created_at]

    def destroy_secret_id(self, name: str, secret: str | None = None, accessor: str = "") -> bool:
        """Delete the secret id named by its secret or its accessor; False if there was none."""
        tables = self._approle
        with self._transaction() as db:
            role = tables.role_row(db, tables.role, name)
            if role is None:
                raise RoleNotFound(f'role "{name}" does not exist')
            statement, key = (
                (tables.secret_id, digest(secret))
                if secret is not None
                else (tables.secret_id_by_accessor, accessor)
            )
            row = tables.secret_row(db, role_info(role), statement, key)
            if row is None:
                return False
            db.execute(tables.delete_secret_id, (row[0],))
        self._changed("approle_secret_id_destroy", role=name, secret_id_accessor=row[0])
        return True

    def approle_rows(self) -> tuple[list[tuple[Any, ...]], list[tuple[Any, ...]]]:
        """Every role and secret-id row as stored, MACs included (``_migrate``). Reads only."""
        tables = self._approle
        with self._connection() as db:
            roles = [tuple(r) for r in db.execute(tables.roles).fetchall()]
            return roles, [tuple(r) for r in db.execute(tables.all_secret_ids).fetchall()]

    # -- login

    def approle_login(
        self, role_id: str, secret: str, address: str | None
    ) -> tuple[RoleInfo, SecretIdInfo | None]:
        """The role and secret id a login presents, the secret id's use counted; LoginRefused
        with Vault's message for anything refused."""
        tables = self._approle
        with self._transaction(changes=False) as db:
            stored = tables.role_row(db, tables.role_by_id, role_id)
            if stored is None:
                raise LoginRefused(INVALID)
            role = role_info(stored)
            if not within(address, role.secret_id_bound_cidrs):
                raise LoginRefused(
                    f'source address "{address}" unauthorized by CIDR restrictions on the role'
                )
            if not role.bind_secret_id:
                return role, None
            if not secret:
                raise LoginRefused("missing secret_id")
            wanted = digest(secret)
            row = tables.secret_row(db, role, tables.secret_id, wanted)
            # Found by its digest, whose timing says nothing of the secret; compared in
            # constant time all the same, as tokens are.
            if row is None or not hmac.compare_digest(row[3], wanted):
                raise LoginRefused(INVALID)
            info = secret_id_info(row)
            if _expired(info, time.time()):
                db.execute(tables.delete_secret_id, (info.accessor,))
                raise LoginRefused(INVALID)
            if not within(address, info.cidrs):
                raise LoginRefused(
                    f'source address "{address}" unauthorized through CIDR restrictions on the'
                    " secret ID"
                )
            tables.count_use(db, row)
        return role, info


def _expired(info: SecretIdInfo, now: float) -> bool:
    return info.expire_time is not None and info.expire_time <= now


def _as_fields(role: RoleInfo) -> dict[str, Any]:
    return {field: getattr(role, field) for field in ROLE_FIELDS}


def _role_row(name: str, role_id: str, f: Mapping[str, Any], created: float) -> tuple[Any, ...]:
    policies = tuple(f["token_policies"])
    if not policies or not all(map(valid_scope, policies)):
        raise InvalidRequest(f"token_policies must be one or more sealflow scopes, not {policies}")
    if f["token_bound_cidrs"]:
        raise InvalidRequest("token_bound_cidrs is not supported: bind the secret ids instead")
    numbers = ("token_ttl", "token_max_ttl", "token_num_uses", "secret_id_ttl")
    for field in (*numbers, "secret_id_num_uses"):
        if isinstance(f[field], bool) or not isinstance(f[field], int) or f[field] < 0:
            raise InvalidRequest(f"{field} must be a whole number, 0 or more")
    if f["token_max_ttl"] and f["token_ttl"] > f["token_max_ttl"]:
        raise InvalidRequest("token_ttl should not be greater than token_max_ttl")
    try:
        bound = networks(f["secret_id_bound_cidrs"])
    except ValueError as exc:
        raise InvalidRequest(f"invalid secret_id_bound_cidrs: {exc}") from None
    if not f["bind_secret_id"] and not bound:
        raise InvalidRequest("at least one constraint should be enabled on the role")
    return (
        name,
        role_id,
        " ".join(policies),
        f["token_ttl"],
        f["token_max_ttl"],
        f["token_num_uses"],
        f["secret_id_ttl"],
        f["secret_id_num_uses"],
        ",".join(bound),
        "",
        int(bool(f["bind_secret_id"])),
        created,
    )
