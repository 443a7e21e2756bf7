"""A running store follows ``rotate-master`` (``_rotation``) without a restart and without a
provider call: it reads the KEK records each time it reloads its cache and before each of its
write transactions, and holds what they say.

- The first record's generation names the KEK the store was opened with (``Integrity.label``).
- While a rotation runs, ``master_kek_next`` holds the next KEK wrapped under the current one:
  the store unwraps it with the KEK it holds and writes under it from then on (reading each
  row under the generation written in front of it).
- Once the rotation has finished, the record is the next generation's and the copy is gone:
  the store keeps the new KEK alone.

A store that holds neither the record's KEK nor the copy (it did not reload while the rotation
ran, which takes far longer than a reload) cannot read what was rewritten: it refuses every
write, says so once, and must be restarted with the new provider's settings.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping

from ._integrity import Integrity
from ._kek import COPY_META, RECORD_META, Record

log = logging.getLogger("sealflow.keystore")

# The metadata rows a store reads to follow (with ``NEXT_META``, which it does not need).
FOLLOWED = (RECORD_META, COPY_META)


def follow(integrity: Integrity, values: Mapping[str, object], where: str) -> None:
    """Hold the KEK generations the records in ``values`` (by meta key) say are in use."""
    record = values.get(RECORD_META)
    generation = 0 if record is None else Record.decode(record, where).generation
    if record is not None:
        # Not before: a store opened on an empty database (a restore's) learns it from the
        # record the restore writes.
        integrity.label(generation)
    if not integrity.holds(generation):
        why = (
            f"keystore {where}: its key-encryption key was rotated (rotate-master) while this"
            " process was not following; restart it with the master-key provider's settings"
        )
        if integrity.lose(why):
            log.error("%s", why)
        return
    copy = values.get(COPY_META)
    if copy is None:
        integrity.retire(generation)
    elif not integrity.holds(generation + 1):
        integrity.adopt(integrity.unwrap_next(copy, generation + 1), generation + 1)
