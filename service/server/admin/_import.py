"""Native BYOK: the wrapping key's public half, keys or versions imported from another engine
in Transit's format (``keystore._byok``; docs/API.md, Importing keys), and a key's versions
wrapped in that format for another engine (``byok-export``, to a public-key-only key made by
Transit's import: docs/TRANSIT.md, Exporting keys to another Transit).

Importing and byok-exporting need ``admin`` and ``export`` on the key, as exporting does:
material crossing the keystore's edge, either way, is the export scope's business. Reading the
wrapping key's public half needs any token.
"""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Query
from pydantic import BaseModel, ConfigDict, Field, StrictBool, StrictFloat, StrictInt

from sealflow.engine import Algorithm
from sealflow.service.keystore import InvalidRequest, KeyNotFound, WrongKeyType, export_material

from .. import _auth
from ._deps import AdminDep, LogDep, ServicesDep, TokenDep
from ._keys import _ERRORS, KeyName, KeyOut

router = APIRouter(prefix="/v1", tags=["import"], responses=_ERRORS)

_CIPHERTEXT = Field(
    min_length=1,
    description="base64 of RSA-OAEP (hash_function, MGF1 alike) under the wrapping key of an"
    " ephemeral AES-256 key, then the key wrapped under it with AES-KWP (RFC 5649)",
)
_HASH = Field("SHA256", description="SHA1, SHA224, SHA256, SHA384 or SHA512")


class WrappingKey(BaseModel):
    public_key: str = Field(description="RSA-4096, PEM (SubjectPublicKeyInfo)")


class ImportedVersion(BaseModel):
    """One version of a whole-key import: its material, or a retired placeholder."""

    model_config = ConfigDict(extra="forbid")

    ciphertext: str | None = Field(None, min_length=1, description="as a single import's")
    placeholder: StrictBool = Field(
        False,
        description="a retired version of random material, never usable (below"
        " min_decryption_version), so that version numbers match the source's",
    )


class KeyImport(BaseModel):
    model_config = ConfigDict(extra="forbid")

    ciphertext: str | None = Field(None, min_length=1, description="version 1 (or `versions`)")
    versions: list[ImportedVersion] | None = Field(
        None, min_length=1, description="versions 1, 2, ... in order (or `ciphertext`)"
    )
    hash_function: str = _HASH
    algorithm: Algorithm = Algorithm.AES_256_GCM
    min_decryption_version: StrictInt = Field(1, ge=1)
    min_encryption_version: StrictInt = Field(0, ge=0)
    deletion_allowed: StrictBool = Field(False)
    exportable: StrictBool = Field(False)
    allow_rotation: StrictBool = Field(False, description="whether sealflow may rotate the key")
    auto_rotate_period: StrictInt | StrictFloat | None = Field(None, ge=0, le=100 * 365 * 86400)

    def ciphertexts(self) -> list[str | None]:
        """Each version's ciphertext (None: a placeholder); InvalidRequest for a body that
        names its versions both ways or neither, or a version that is both or neither."""
        if (self.ciphertext is None) == (self.versions is None):
            raise InvalidRequest("exactly one of ciphertext and versions must be set")
        if self.versions is None:
            return [self.ciphertext]
        for v in self.versions:
            if (v.ciphertext is None) != v.placeholder:
                raise InvalidRequest("each version needs either a ciphertext or placeholder: true")
        return [v.ciphertext for v in self.versions]


class VersionImport(BaseModel):
    model_config = ConfigDict(extra="forbid")

    ciphertext: str = _CIPHERTEXT
    hash_function: str = _HASH


@router.get("/wrapping-key", summary="The import wrapping key's public half (any token)")
def wrapping_key(svc: ServicesDep, _: TokenDep) -> WrappingKey:
    return WrappingKey(public_key=svc.store.wrapping_public_pem())


@router.post(
    "/keys/{name}/import",
    status_code=201,
    summary="Create a key of imported material, one version or a whole key's (scopes admin and"
    " export on the key)",
)
def import_key(
    name: KeyName, body: KeyImport, svc: ServicesDep, token: AdminDep, log: LogDep
) -> KeyOut:
    log.key = name
    _auth.require(token, "export", name)
    ciphertexts = body.ciphertexts()
    # Every version unwrapped before anything is written: one bad ciphertext refuses the key.
    materials = [
        None if c is None else svc.store.unwrap_import(c, body.hash_function) for c in ciphertexts
    ]
    key = svc.store.import_versions(
        name,
        body.algorithm,
        materials,
        min_decryption_version=body.min_decryption_version,
        min_encryption_version=body.min_encryption_version,
        deletion_allowed=body.deletion_allowed,
        exportable=body.exportable,
        allow_rotation=body.allow_rotation,
        auto_rotate_period=body.auto_rotate_period or None,
    )
    log.version = key.latest
    return KeyOut.of(key, svc.store)


@router.post(
    "/keys/{name}/import-version",
    summary="Add a version of imported material to an imported key (admin and export)",
)
def import_version(
    name: KeyName, body: VersionImport, svc: ServicesDep, token: AdminDep, log: LogDep
) -> KeyOut:
    log.key = name
    _auth.require(token, "export", name)
    svc.store.get_key(name)  # 404 for a key that is not there, before any RSA work
    material = svc.store.unwrap_import(body.ciphertext, body.hash_function)
    key = svc.store.import_version(name, material)
    log.version = key.latest
    return KeyOut.of(key, svc.store)


class ByokExport(BaseModel):
    name: str
    algorithm: Algorithm
    keys: dict[str, str] = Field(description="version -> the import ciphertext (base64)")


@router.get(
    "/keys/{name}/byok-export/{destination}",
    summary="The key's versions wrapped for a public-key-only key, in Transit's import format"
    " (admin and export on the key)",
)
def byok_export(
    name: KeyName,
    destination: KeyName,
    svc: ServicesDep,
    token: AdminDep,
    log: LogDep,
    version: Annotated[int | None, Query(ge=1)] = None,
    hash_function: Annotated[str, Query(alias="hash")] = "SHA256",
) -> ByokExport:
    """Every version from min_decryption_version up, or the one asked, each as Transit's
    ``byok-export`` wraps it; the export rules are the export route's (``export_material``)."""
    log.key = name
    _auth.require(token, "export", name)
    target = svc.store.public_key(destination)
    if target is None:
        raise KeyNotFound(f"no public-key-only key {destination!r}")
    key = export_material(svc.store, name, version)[0]
    algorithm = key.key_type.aead
    if algorithm is None:  # Transit's byok-export takes what the native shape cannot name
        raise WrongKeyType(f"key {name!r} is of type {key.key_type.name}: use Transit")
    wanted = [v.version for v in key.versions if v.version >= key.min_decryption_version]
    keys = {}
    for number in wanted if version is None else [version]:
        keys[str(number)] = target.wrap(export_material(svc.store, name, number)[2], hash_function)
        log.used(number)
    return ByokExport(name=name, algorithm=algorithm, keys=keys)
