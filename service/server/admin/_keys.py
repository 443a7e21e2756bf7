"""Admin routes: create, list, show, rotate, patch, delete and export keys (scope ``admin``).

What lets material leave, exporting it or making a key exportable (created so, or by ``PATCH``),
needs ``export`` on the key besides: ``admin`` does not imply it (``_auth``), and the scope is
checked before anything is written.

Plain ``def`` routes: FastAPI runs them on its thread pool, so a keystore write
(one SQLite transaction, fsynced) never blocks the event loop.
"""

from __future__ import annotations

import base64
from datetime import UTC, datetime
from typing import Annotated

from fastapi import APIRouter, Path, Query, Response
from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    StrictBool,
    StrictFloat,
    StrictInt,
    field_serializer,
)

from sealflow.engine import Algorithm
from sealflow.service.keystore import (
    KeyInfo,
    KeyStore,
    VersionUsage,
    WrongKeyType,
    export_material,
    next_rotation,
)

from .. import _auth, errors
from ._deps import AdminDep, LogDep, ServicesDep


class ErrorBody(BaseModel):
    code: str
    message: str


class ErrorOut(BaseModel):
    error: ErrorBody


def _error(what: str) -> dict[str, object]:
    return {"model": ErrorOut, "description": what}


# What these routes answer besides success (never 422: validation errors are 400).
_ERRORS: dict[int | str, dict[str, object]] = {
    400: _error("bad_request: the body or a parameter is invalid, or a lowering not asked for"),
    401: _error("unauthorized: no valid bearer token"),
    403: _error(
        "forbidden (the token lacks admin, or export on the key to export it or make it"
        " exportable), not_exportable or version_retired"
    ),
    404: _error("key_not_found"),
    409: _error("key_exists, or deletion_not_allowed (set deletion_allowed first)"),
    413: _error("too_large: the body exceeds 64 KiB"),
    415: _error("unsupported_media_type: a body not declared as JSON"),
    503: _error("keystore_unavailable"),
}
# FastAPI reads a body as JSON only when it is declared so (and then before the token check);
# any other body is refused with 415 (errors._body_not_json), after the token check.
router = APIRouter(prefix="/v1/keys", tags=["keys"], responses=_ERRORS)

KeyName = Annotated[str, Path(max_length=64)]


_MAX_ENCRYPTIONS = Field(
    None,
    ge=1,
    le=2**32,
    description="sealings per version before an automatic rotation (default 2^32, NIST SP"
    " 800-38D's bound for random 96-bit nonces)",
)
_PERIOD = Field(
    None,
    ge=0,
    le=100 * 365 * 86400,
    description="seconds a version is used before an automatic rotation; 0: never (default)",
)


class KeyCreate(BaseModel):
    model_config = ConfigDict(extra="forbid")

    name: str = Field(pattern=r"^[a-z0-9][a-z0-9._-]*$", max_length=64)
    algorithm: Algorithm = Algorithm.AES_256_GCM
    exportable: bool = Field(False, description="true needs the export scope on the name too")
    max_encryptions: StrictInt | None = _MAX_ENCRYPTIONS
    auto_rotate_period: StrictInt | StrictFloat | None = _PERIOD


class KeyPatch(BaseModel):
    model_config = ConfigDict(extra="forbid")

    # Strict: `true`, "2" and 2.0 are not versions.
    min_decryption_version: StrictInt | None = Field(None, ge=1)
    allow_lowering: StrictBool = Field(
        False, description="must be true to lower min_decryption_version (retired versions return)"
    )
    max_encryptions: StrictInt | None = _MAX_ENCRYPTIONS
    auto_rotate_period: StrictInt | StrictFloat | None = _PERIOD
    min_encryption_version: StrictInt | None = Field(
        None,
        ge=0,
        description="the lowest version Transit's encrypt may be asked for by key_version (0:"
        " any); native encryption always uses the latest",
    )
    deletion_allowed: StrictBool | None = Field(
        None, description="whether DELETE may remove the key and all its versions"
    )
    exportable: StrictBool | None = Field(
        None,
        description="true makes the key exportable, every version (never undone: false on an"
        " exportable key is a 400); true needs the export scope on the key too",
    )


def _utc(value: datetime) -> str:
    # Always six fractional digits (pydantic drops a zero fraction): one fixed format.
    return value.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


class VersionOut(BaseModel):
    version: int
    created_at: datetime
    encryptions: int = Field(
        description="sealings counted (reserved in blocks: never fewer than made)"
    )
    bytes: int = Field(description="plaintext bytes sealed (written every few seconds)")

    @field_serializer("created_at")
    def _utc_microseconds(self, value: datetime) -> str:
        return _utc(value)


class KeyOut(BaseModel):
    name: str
    algorithm: Algorithm | None = Field(
        description="the AEAD the key seals with; null for a Transit-only type (hmac, signing)"
    )
    type: str = Field(description="Transit's key type name (aes256-gcm96, hmac, ed25519, ...)")
    derived: bool = Field(description="a Transit derived key: used through Transit only")
    exportable: bool
    latest: int
    min_decryption_version: int
    min_encryption_version: int
    deletion_allowed: bool
    imported: bool = Field(description="made by an import, and not rotated here since")
    min_available_version: int = Field(description="versions below it were trimmed (0: none)")
    soft_deleted: bool = Field(description="every use refused until restored")
    versions: list[VersionOut]
    max_encryptions: int
    auto_rotate_period: float
    encryptions_left: int = Field(description="sealings the latest version has before rotating")
    next_rotation_at: datetime | None = Field(description="when it rotates by time, if it does")

    @field_serializer("next_rotation_at")
    def _utc_next(self, value: datetime | None) -> str | None:
        return None if value is None else _utc(value)

    @classmethod
    def of(cls, key: KeyInfo, store: KeyStore) -> KeyOut:
        usage = store.usage(key.name)
        none = VersionUsage(0, 0)
        when = next_rotation(key)
        return cls(
            name=key.name,
            algorithm=key.key_type.aead,
            type=key.key_type.name,
            derived=key.key_type.derived,
            exportable=key.exportable,
            latest=key.latest,
            min_decryption_version=key.min_decryption_version,
            min_encryption_version=key.min_encryption_version,
            deletion_allowed=key.deletion_allowed,
            imported=key.imported,
            min_available_version=key.min_available_version,
            soft_deleted=key.soft_deleted,
            versions=[
                VersionOut(
                    version=v.version,
                    created_at=datetime.fromtimestamp(v.created_at, UTC),
                    encryptions=usage.get(v.version, none).encryptions,
                    bytes=usage.get(v.version, none).bytes,
                )
                for v in key.versions
            ],
            max_encryptions=key.max_encryptions,
            auto_rotate_period=key.auto_rotate_period,
            encryptions_left=max(key.max_encryptions - usage.get(key.latest, none).encryptions, 0),
            next_rotation_at=None if when is None else datetime.fromtimestamp(when, UTC),
        )


class KeyList(BaseModel):
    keys: list[KeyOut]


class KeyExport(BaseModel):
    name: str
    version: int
    algorithm: Algorithm
    key: str = Field(description="the key material, base64")


@router.post("", status_code=201, summary="Create a key (version 1)")
def create_key(body: KeyCreate, svc: ServicesDep, token: AdminDep, log: LogDep) -> KeyOut:
    log.key = body.name
    if body.exportable:
        _auth.require(token, "export", body.name)
    key = svc.store.create_key(
        body.name, body.algorithm, body.exportable, body.max_encryptions, body.auto_rotate_period
    )
    return KeyOut.of(key, svc.store)


@router.get("", summary="List keys (metadata only)")
def list_keys(svc: ServicesDep, _: AdminDep) -> KeyList:
    return KeyList(keys=[KeyOut.of(k, svc.store) for k in svc.store.list_keys()])


@router.get("/{name}", summary="Show a key (metadata only)")
def show_key(name: KeyName, svc: ServicesDep, _: AdminDep, log: LogDep) -> KeyOut:
    log.key = name
    return KeyOut.of(svc.store.get_key(name), svc.store)


@router.post("/{name}/rotate", summary="Add a version; new encryptions use it")
def rotate_key(name: KeyName, svc: ServicesDep, _: AdminDep, log: LogDep) -> KeyOut:
    key = svc.store.rotate_key(name)
    log.key, log.version = name, key.latest
    return KeyOut.of(key, svc.store)


@router.patch(
    "/{name}",
    summary="Retire old versions; change usage limits; allow deletion; make exportable",
)
def patch_key(
    name: KeyName, body: KeyPatch, svc: ServicesDep, token: AdminDep, log: LogDep
) -> KeyOut:
    log.key = name
    if body.exportable:
        _auth.require(token, "export", name)
    limits = body.max_encryptions, body.auto_rotate_period
    rules = body.min_decryption_version, body.min_encryption_version, body.deletion_allowed
    if rules == (None, None, None) and body.exportable is None and limits == (None, None):
        raise errors.bad_request(
            "nothing to change: give min_decryption_version, min_encryption_version,"
            " deletion_allowed, exportable, max_encryptions or auto_rotate_period"
        )
    key = svc.store.get_key(name)
    if rules != (None, None, None) or body.exportable is not None:
        key = svc.store.configure(
            name, *rules, allow_lowering=body.allow_lowering, exportable=body.exportable
        )
    if limits != (None, None):
        key = svc.store.set_limits(name, *limits)
    return KeyOut.of(key, svc.store)


@router.delete(
    "/{name}",
    status_code=204,
    summary="Delete a key and every version's material (only once deletion_allowed is set)",
)
def delete_key(name: KeyName, svc: ServicesDep, _: AdminDep, log: LogDep) -> Response:
    log.key = name
    svc.store.delete_key(name)
    svc.usage.forget(name)
    return Response(status_code=204)


@router.get(
    "/{name}/export",
    summary="Export key material (scopes admin and export on the key; exportable keys, versions"
    " not below min_decryption_version)",
)
def export_key(
    name: KeyName,
    svc: ServicesDep,
    token: AdminDep,
    log: LogDep,
    version: Annotated[int | None, Query(ge=1)] = None,
) -> KeyExport:
    log.key, log.version = name, version  # as asked, should the export be refused
    _auth.require(token, "export", name)
    key, version, material = export_material(svc.store, name, version)
    log.version = version
    aead = key.key_type.aead
    if aead is None:  # its material is not an AEAD key: Transit's export routes give it
        raise WrongKeyType(
            f"key {name!r} is of type {key.key_type.name}: export it through Transit"
        )
    return KeyExport(
        name=name,
        version=version,
        algorithm=aead,
        key=base64.b64encode(material).decode(),
    )
