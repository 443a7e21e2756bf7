"""What a keystore offers of the cert auth method (``_cert_roles``): its certificate roles, as
the server and the CLI see them."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Protocol


@dataclass(frozen=True, slots=True)
class CertRoleInfo:
    """A certificate role (Vault's ``auth/cert/certs/:name``): a client certificate that
    ``certificate`` (a CA, or the very leaf) signed and that every ``allowed_*`` rule matches
    (globs; an empty rule matches anything) logs in to an orphan token with ``token_policies``
    as its scopes."""

    name: str
    certificate: str  # PEM, one or more certificates
    allowed_common_names: tuple[str, ...]
    allowed_dns_sans: tuple[str, ...]
    allowed_email_sans: tuple[str, ...]
    allowed_uri_sans: tuple[str, ...]
    allowed_organizational_units: tuple[str, ...]
    token_policies: tuple[str, ...]
    token_ttl: int
    token_max_ttl: int
    display_name: str
    created_at: float


class CertRoleStore(Protocol):
    """Every keystore's cert part. Errors: RoleNotFound, InvalidRequest (a message safe to
    show), KeyStoreCorrupt for a row that fails its check."""

    def write_cert_role(self, name: str, fields: Mapping[str, Any]) -> CertRoleInfo:
        """Create the role, or change the fields given (``_cert_roles.CERT_FIELDS``)."""

    def get_cert_role(self, name: str) -> CertRoleInfo: ...

    def list_cert_roles(self) -> list[CertRoleInfo]:
        """Every role whose row passes its check, by name."""

    def delete_cert_role(self, name: str) -> bool:
        """Delete the role; False if there was none."""

    def cert_role_rows(self) -> list[tuple[Any, ...]]:
        """Every role's row as stored, MAC included (``_migrate``)."""
