"""Native key lifecycle (scope ``admin``, like every key management route): a trim removes the
versions below ``min_available_version`` (Transit's rules: both minimum versions set first), a
soft deletion refuses every use of the key until it is restored, with every version it had
(``keystore._lifecycle``; docs/API.md, Key lifecycle). Soft deleting or restoring twice
changes nothing and says so in ``warnings``.
"""

from __future__ import annotations

from fastapi import APIRouter
from pydantic import BaseModel, ConfigDict, Field, StrictInt

from ._deps import AdminDep, LogDep, ServicesDep
from ._keys import _ERRORS, KeyName, KeyOut

router = APIRouter(prefix="/v1/keys", tags=["keys"], responses=_ERRORS)


class KeyTrim(BaseModel):
    model_config = ConfigDict(extra="forbid")

    min_available_version: StrictInt = Field(
        description="versions below it are removed for good; at most min_decryption_version"
        " and min_encryption_version, and never lower than before"
    )


class KeyMarked(BaseModel):
    key: KeyOut
    warnings: list[str] = Field(description="why nothing changed, if nothing did")


@router.post("/{name}/trim", summary="Remove the versions below min_available_version for good")
def trim_key(name: KeyName, body: KeyTrim, svc: ServicesDep, _: AdminDep, log: LogDep) -> KeyOut:
    log.key = name
    key = svc.store.trim_key(name, body.min_available_version)
    return KeyOut.of(key, svc.store)


@router.post("/{name}/soft-delete", summary="Refuse every use of the key until it is restored")
def soft_delete_key(name: KeyName, svc: ServicesDep, _: AdminDep, log: LogDep) -> KeyMarked:
    log.key = name
    key, already = svc.store.soft_delete_key(name)
    warnings = ["the key was soft-deleted already"] if already else []
    return KeyMarked(key=KeyOut.of(key, svc.store), warnings=warnings)


@router.post("/{name}/restore", summary="Lift a soft deletion: every version usable again")
def restore_key(name: KeyName, svc: ServicesDep, _: AdminDep, log: LogDep) -> KeyMarked:
    log.key = name
    key, already = svc.store.undo_soft_delete(name)
    warnings = ["the key was not soft-deleted"] if already else []
    return KeyMarked(key=KeyOut.of(key, svc.store), warnings=warnings)
