"""``sealflow keystore rotate-master`` as a whole: which provider seals the KEK now (the
keystore's record says, so the current provider needs only its own settings), the target
provider from the same settings ``serve`` reads, a new KEK, and ``_rotation``'s batches.

A run that finds a rotation under way resumes it: its target must be the same provider and
key, which unseals the next record (one provider call, so a target that cannot be used fails
before any row is touched). The secret is carried over unchanged: audit trails keep verifying
and backups keep opening (a backup made before carries the old record, so it needs the old
provider's key).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from contextlib import closing
from dataclasses import dataclass, field

from sealflow.service.config import Settings

from . import _kek, _kek_rows
from ._kek import Keys, Record
from ._postgres import redact
from ._provision import keystore_url, open_store
from ._rotation import Progress, Rotation, batches
from ._seals import seal_for
from ._unlock import unlock
from ._writes import Writes
from .errors import KeyStoreUnavailable

# Before the record is replaced: every running process reloads at least once a second
# (PostgreSQL's watcher; an SQLite server's per-second check), so by then each has read the
# copy of the new KEK and can follow the switch without a provider call (``_kek_follow``).
GRACE = 3.0


@dataclass(frozen=True, slots=True)
class Rotated:
    """What a run did, for the command's report and its audit record."""

    old: Record = field(repr=False)
    new: Record = field(repr=False)
    resumed: bool
    progress: Progress


def current_provider(settings: Settings) -> str:
    """The provider that seals the keystore's KEK: its record's, else (a keystore made before
    providers) the configured one; KeyStoreUnavailable if there is no keystore."""
    url = keystore_url(settings)
    where = str(settings.keystore_path) if url is None else redact(url)
    if url is None:
        exists, value = _kek_rows.read_sqlite(settings.keystore_path)
    else:
        exists, value = _kek_rows.read_postgres(url, where)
    if not exists:
        # Not made here: a rotation of a keystore that is not there is a wrong path or URL.
        raise KeyStoreUnavailable(f"no keystore at {where} (`sealflow serve` creates one)")
    if value is None:
        return settings.master_key_provider
    return Record.decode(value, where).provider


def rotate_master(
    settings: Settings,
    to: str | None,
    batch: int,
    on_batch: Callable[[int], None],
) -> Rotated:
    """Rotate the KEK of the keystore the settings name to a new one sealed by ``to`` (None:
    the provider sealing it now); ``on_batch`` hears each batch's count."""
    now = current_provider(settings)
    # The current provider from the record, its settings from the same place as serve's.
    here = settings.model_copy(update={"master_key_provider": now})
    url = keystore_url(here)
    store = open_store(here, watch=False)
    with closing(store):
        assert isinstance(store, Writes)
        unlocked = unlock(here, url)  # from memory: open_store unsealed it
        target_name = to or unlocked.record.provider
        target = seal_for(settings, target_name)
        rotation = Rotation(store, batch)
        started = time.monotonic()
        pending = rotation.pending()
        if pending is None:
            new = Keys.new_kek(unlocked.keys.secret)
            generation = unlocked.record.generation + 1
            following = _kek.seal(target, target_name, new, generation)
            rotation.begin(unlocked.record, new, following)
        else:
            following = pending
            if pending.provider != target_name or pending.identity != target.describe():
                raise KeyStoreUnavailable(
                    f"keystore {store.where}: a rotation to the {pending.names()} master-key"
                    f" provider is under way; run rotate-master --to {pending.provider} with its"
                    " settings to finish it"
                )
            new = _kek.unseal(target, target_name, pending)
            if not rotation.holds(new, pending.generation):
                raise KeyStoreUnavailable(
                    f"keystore {store.where}: the rotation under way does not match its record;"
                    " refused"
                )
        _kek.remember(target, target_name, following, new)
        for done in batches(rotation):
            on_batch(done)
        time.sleep(max(0.0, GRACE - (time.monotonic() - started)))
        rotation.finish(following)
        rotated = Rotated(unlocked.record, following, pending is not None, rotation.progress)
    return rotated
