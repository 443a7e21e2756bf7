"""The audit trail of one CLI invocation: its change records, and where they go for a message."""

from __future__ import annotations

import os
import pwd

from sealflow.service.audit import Auditor
from sealflow.service.config import Settings
from sealflow.service.keystore import AUDIT_TABLE, ChangeHook


def sinks(settings: Settings) -> str:
    """Where the audit trail goes, for a message."""
    named = [str(settings.audit_file)] if settings.audit_file is not None else []
    named += ["stdout"] if settings.audit_stdout else []
    named += [f"table {AUDIT_TABLE}"] if settings.audit_postgres else []
    return ", ".join(named)


def recording(auditor: Auditor) -> ChangeHook:
    """The keystore's change hook of one CLI invocation: a change record, origin cli, naming
    the OS user who ran it (docs/AUDIT.md)."""
    try:
        user = pwd.getpwuid(os.getuid()).pw_name
    except KeyError:  # a uid with no passwd entry (a container's)
        user = str(os.getuid())

    def record(operation: str, fields: dict[str, object]) -> None:
        base = {"type": "change", "origin": "cli", "os_user": user, "operation": operation}
        auditor.record({**base, **fields})

    return record
