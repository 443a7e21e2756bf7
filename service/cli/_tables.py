"""Human-readable output of ``keys list``, ``keys show`` and ``tokens list``: aligned columns
from the same dictionaries ``--json`` prints whole (``_manage``), so the two cannot disagree."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any


def _cell(value: object) -> str:
    """One cell: no control characters (a label is the user's text), '-' for nothing."""
    if value is None or value == "":
        return "-"
    if isinstance(value, bool):
        return "yes" if value else "no"
    return "".join(c if c.isprintable() else " " for c in str(value))


def table(headers: Sequence[str], rows: Sequence[Sequence[object]]) -> str:
    cells = [list(headers), *([_cell(v) for v in row] for row in rows)]
    widths = [max(len(row[i]) for row in cells) for i in range(len(headers))]
    return "\n".join(
        "  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)).rstrip() for row in cells
    )


def keys(listed: Sequence[dict[str, Any]]) -> str:
    return table(
        ["NAME", "TYPE", "LATEST", "MIN DECRYPT", "EXPORTABLE", "SEALINGS LEFT", "NEXT ROTATION"],
        [
            [
                k["name"],
                k["algorithm"] or k["type"],
                k["latest"],
                k["min_decryption_version"],
                k["exportable"],
                k["encryptions_left"],
                k["next_rotation_at"],
            ]
            for k in listed
        ],
    )


def key(shown: dict[str, Any]) -> str:
    fields = [
        ("name", shown["name"]),
        ("type", shown["algorithm"] or shown["type"]),
        ("latest version", shown["latest"]),
        ("min decryption version", shown["min_decryption_version"]),
        ("min encryption version", shown["min_encryption_version"]),
        ("exportable", shown["exportable"]),
        ("deletion allowed", shown["deletion_allowed"]),
        ("max sealings per version", shown["max_encryptions"]),
        ("auto-rotate period (s)", shown["auto_rotate_period"] or "never"),
        ("sealings left (latest)", shown["encryptions_left"]),
        ("next rotation", shown["next_rotation_at"]),
    ]
    width = max(len(name) for name, _ in fields)
    head = "\n".join(f"{name + ':':<{width + 1}} {_cell(value)}" for name, value in fields)
    versions = table(
        ["VERSION", "CREATED", "SEALINGS", "BYTES"],
        [[v["version"], v["created_at"], v["encryptions"], v["bytes"]] for v in shown["versions"]],
    )
    return f"{head}\n\n{versions}"


def _state(token: dict[str, Any]) -> str:
    return "revoked" if token["revoked"] else "expired" if token["expired"] else "active"


def tokens(listed: Sequence[dict[str, Any]]) -> str:
    return table(
        ["ID", "LABEL", "STATE", "SCOPES", "CREATED", "EXPIRES", "USES LEFT"],
        [
            [
                t["id"],
                t["label"],
                _state(t),
                " ".join(t["scopes"]),
                t["created_at"],
                t["expire_time"] or "never",
                t["uses_left"] if t["uses_left"] is not None else "unlimited",
            ]
            for t in listed
        ],
    )
