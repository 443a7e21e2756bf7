"""The sealings of a Transit request (encrypt, rewrap, datakey), leased before they are made
through the one rule every sealing follows (``UsageMeter.lease``, docs/SERVICE.md, Usage).

Items that ask for the latest version are leased together, in input order: if the version is
used up on the way, the key rotates once and the rest go under the new version (each item's
answer names its own). Items that ask for a version by number are leased per version, and those
it has nothing left for fail with ``VERSION_USED_UP``: they are never sealed.
"""

from __future__ import annotations

from sealflow.service.keystore import KeyInfo, KeyNotFound, Lease, VersionUsedUp

from .._state import Services
from . import _wire
from ._batch import Results
from ._checks import KEY_NOT_FOUND


def version_used_up(key: KeyInfo) -> str:
    return (
        f"requested version for encryption has reached its max_encryptions"
        f" ({key.max_encryptions}) and seals nothing more: use a later key version"
    )


def lease_items(
    svc: Services,
    key: KeyInfo,
    wanted: dict[int, int],
    plaintexts: dict[int, bytes],
    results: Results,
    taken: dict[int, Lease] | None = None,
) -> tuple[dict[int, int], dict[int, bytes]]:
    """The version each pending item with a plaintext is sealed under, and the material of
    each version, every sealing counted (and its bytes). ``wanted``: the version each asks
    for (0: the latest; ``_checks.wanted_versions``). ``taken``: per version asked for, a
    lease the caller took already for the first of its items (``_encrypt``: a column it could
    not seal whole)."""
    groups: dict[int, list[int]] = {}
    for i in results.pending():
        if i in wanted and i in plaintexts:
            groups.setdefault(wanted[i], []).append(i)
    versions: dict[int, int] = {}
    materials: dict[int, bytes] = {}
    for asked, members in groups.items():
        lease = None if taken is None else taken.get(asked)
        start = 0
        while start < len(members):
            if lease is None:
                lease = _lease(svc, key, asked, len(members) - start)
            if lease is None:
                for i in members[start:]:
                    results.fail(i, version_used_up(key))
                break
            if lease.key.born != key.born:  # deleted and created again since the checks
                raise _wire.user_error(KEY_NOT_FOUND)
            part = members[start : start + lease.sealings]
            svc.usage.add_bytes(lease, sum(len(plaintexts[i]) for i in part))
            versions.update(dict.fromkeys(part, lease.version))
            materials[lease.version] = lease.material
            start += len(part)
            lease = None
    return versions, materials


def _lease(svc: Services, key: KeyInfo, asked: int, n: int) -> Lease | None:
    """Up to n sealings under the version asked for (0: the latest), or None if it is used
    up; Transit's 'not found' for a key deleted since the checks."""
    try:
        # Every caller seals a derived key's items under their context's key (``_crypto``).
        return svc.usage.lease(key.name, asked or None, n, derived=key.key_type.derived)
    except VersionUsedUp:
        return None
    except KeyNotFound:
        raise _wire.user_error(KEY_NOT_FOUND) from None
