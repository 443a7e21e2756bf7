"""What a keystore offers of AppRole (``_approle``): its roles and secret ids, as the server
and the CLI see them."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Protocol


@dataclass(frozen=True, slots=True)
class RoleInfo:
    """An AppRole role: a login with its role id (and a secret id of it, when
    ``bind_secret_id``) yields an orphan token with ``token_policies`` as its scopes."""

    name: str
    role_id: str
    token_policies: tuple[str, ...]
    token_ttl: int
    token_max_ttl: int
    token_num_uses: int
    secret_id_ttl: int
    secret_id_num_uses: int
    secret_id_bound_cidrs: tuple[str, ...]
    token_bound_cidrs: tuple[str, ...]
    bind_secret_id: bool
    created_at: float


@dataclass(frozen=True, slots=True)
class SecretIdInfo:
    """A secret id without its secret. ``num_uses`` 0: no limit; ``uses`` made so far."""

    accessor: str
    role: str
    created_at: float
    expire_time: float | None
    num_uses: int
    uses: int
    cidrs: tuple[str, ...]
    metadata: str  # a JSON object of strings, as given

    @property
    def uses_left(self) -> int:
        return self.num_uses - self.uses if self.num_uses else 0


class AppRoleStore(Protocol):
    """Every keystore's AppRole part. Errors: RoleNotFound, InvalidRequest (a message safe to
    show), LoginRefused (Vault's words), KeyStoreCorrupt for a row that fails its check."""

    def write_role(self, name: str, fields: Mapping[str, Any]) -> RoleInfo:
        """Create the role, or change the fields given (``_approle.ROLE_FIELDS``)."""

    def get_role(self, name: str) -> RoleInfo: ...

    def list_roles(self) -> list[RoleInfo]: ...

    def delete_role(self, name: str) -> bool:
        """Delete the role and its secret ids; False if there was none."""

    def set_role_id(self, name: str, role_id: str) -> RoleInfo: ...

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
        """A new secret id and its secret, shown once (stored as its digest only)."""

    def lookup_secret_id(
        self, name: str, secret: str | None = None, accessor: str = ""
    ) -> SecretIdInfo | None: ...

    def list_secret_ids(self, name: str) -> list[SecretIdInfo]: ...

    def destroy_secret_id(self, name: str, secret: str | None = None, accessor: str = "") -> bool:
        """Delete the secret id named by its secret or accessor; False if there was none."""

    def approle_login(
        self, role_id: str, secret: str, address: str | None
    ) -> tuple[RoleInfo, SecretIdInfo | None]:
        """The role and secret id of a login from ``address``, one use of the secret id
        counted; LoginRefused with Vault's message otherwise."""
