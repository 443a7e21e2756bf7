"""Admin routes: create, list, show, rotate, patch and export keys (scope ``admin``).

Plain ``def`` routes: FastAPI runs them on its thread pool, so a keystore write
(one SQLite transaction, fsynced) never blocks the event loop.
"""

from __future__ import annotations

import base64
from datetime import UTC, datetime
from typing import Annotated

from fastapi import APIRouter, Path, Query
from pydantic import BaseModel, ConfigDict, Field, StrictBool, StrictInt, field_serializer

from sealflow.engine import Algorithm
from sealflow.service.keystore import KeyInfo, export_material

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
    403: _error("forbidden (the token lacks admin), not_exportable or version_retired"),
    404: _error("key_not_found"),
    409: _error("key_exists"),
    413: _error("too_large: the body exceeds 64 KiB"),
    415: _error("unsupported_media_type: a body not declared as JSON"),
    503: _error("keystore_unavailable"),
}
# FastAPI reads a body as JSON only when it is declared so (and then before the token check);
# any other body is refused with 415 (errors._body_not_json), after the token check.
router = APIRouter(prefix="/v1/keys", tags=["keys"], responses=_ERRORS)

KeyName = Annotated[str, Path(max_length=64)]


class KeyCreate(BaseModel):
    model_config = ConfigDict(extra="forbid")

    name: str = Field(pattern=r"^[a-z0-9][a-z0-9._-]*$", max_length=64)
    algorithm: Algorithm = Algorithm.AES_256_GCM
    exportable: bool = False


class KeyPatch(BaseModel):
    model_config = ConfigDict(extra="forbid")

    # Strict: `true`, "2" and 2.0 are not versions.
    min_decryption_version: StrictInt = Field(ge=1)
    allow_lowering: StrictBool = Field(
        False, description="must be true to lower min_decryption_version (retired versions return)"
    )


class VersionOut(BaseModel):
    version: int
    created_at: datetime

    @field_serializer("created_at")
    def _utc_microseconds(self, value: datetime) -> str:
        # Always six fractional digits (pydantic drops a zero fraction): one fixed format.
        return value.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


class KeyOut(BaseModel):
    name: str
    algorithm: Algorithm
    exportable: bool
    latest: int
    min_decryption_version: int
    versions: list[VersionOut]

    @classmethod
    def of(cls, key: KeyInfo) -> KeyOut:
        return cls(
            name=key.name,
            algorithm=key.algorithm,
            exportable=key.exportable,
            latest=key.latest,
            min_decryption_version=key.min_decryption_version,
            versions=[
                VersionOut(version=v.version, created_at=datetime.fromtimestamp(v.created_at, UTC))
                for v in key.versions
            ],
        )


class KeyList(BaseModel):
    keys: list[KeyOut]


class KeyExport(BaseModel):
    name: str
    version: int
    algorithm: Algorithm
    key: str = Field(description="the key material, base64")


@router.post("", status_code=201, summary="Create a key (version 1)")
def create_key(body: KeyCreate, svc: ServicesDep, _: AdminDep, log: LogDep) -> KeyOut:
    log.key = body.name
    return KeyOut.of(svc.store.create_key(body.name, body.algorithm, body.exportable))


@router.get("", summary="List keys (metadata only)")
def list_keys(svc: ServicesDep, _: AdminDep) -> KeyList:
    return KeyList(keys=[KeyOut.of(k) for k in svc.store.list_keys()])


@router.get("/{name}", summary="Show a key (metadata only)")
def show_key(name: KeyName, svc: ServicesDep, _: AdminDep, log: LogDep) -> KeyOut:
    log.key = name
    return KeyOut.of(svc.store.get_key(name))


@router.post("/{name}/rotate", summary="Add a version; new encryptions use it")
def rotate_key(name: KeyName, svc: ServicesDep, _: AdminDep, log: LogDep) -> KeyOut:
    key = svc.store.rotate_key(name)
    log.key, log.version = name, key.latest
    return KeyOut.of(key)


@router.patch("/{name}", summary="Retire old versions for decryption")
def patch_key(name: KeyName, body: KeyPatch, svc: ServicesDep, _: AdminDep, log: LogDep) -> KeyOut:
    log.key = name
    key = svc.store.set_min_decryption_version(
        name, body.min_decryption_version, body.allow_lowering
    )
    return KeyOut.of(key)


@router.get(
    "/{name}/export",
    summary="Export key material (exportable keys, versions not below min_decryption_version)",
)
def export_key(
    name: KeyName,
    svc: ServicesDep,
    _: AdminDep,
    log: LogDep,
    version: Annotated[int | None, Query(ge=1)] = None,
) -> KeyExport:
    log.key, log.version = name, version  # as asked, should the export be refused
    key, version, material = export_material(svc.store, name, version)
    log.version = version
    return KeyExport(
        name=name,
        version=version,
        algorithm=key.algorithm,
        key=base64.b64encode(material).decode(),
    )
