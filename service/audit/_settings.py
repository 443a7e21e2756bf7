"""The sinks and mode the settings name (``SEALFLOW_AUDIT_FILE`` and the rest), for the
server and the CLI alike."""

from __future__ import annotations

from collections.abc import Mapping

from sealflow.service.config import Settings

from ._auditor import Auditor
from ._chain import writer_id
from ._keys import audit_key
from ._sinks import FileSink, Sink, StdoutSink


def open_auditor(
    settings: Settings,
    master_key: bytes,
    table: Sink | None,
    constant: Mapping[str, object] | None = None,
) -> Auditor | None:
    """A new writer's ``Auditor`` over the sinks the settings set, or None when they set none;
    ``constant``: fields every record carries.

    ``table``: the keystore's audit table (``SEALFLOW_AUDIT_POSTGRES``), which the caller
    opens (``sealflow.service.keystore.audit_table``: this package knows no database), or
    None. Required, so that no caller can leave it out by forgetting it.
    """
    sinks: list[Sink] = []
    if settings.audit_file is not None:
        sinks.append(FileSink(settings.audit_file, settings.audit_rotate_bytes))
    if settings.audit_stdout:
        sinks.append(StdoutSink())
    if table is not None:
        sinks.append(table)
    if not sinks:
        return None
    key, mode = audit_key(master_key), settings.audit_mode
    return Auditor(key, sinks, writer_id(), mode, constant=constant)
