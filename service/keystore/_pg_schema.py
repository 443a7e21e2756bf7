"""The PostgreSQL keystore's schema: versioned migrations, applied by sealflow itself at open.

``sealflow_migrations`` records every migration applied (number, description, time). Opening
takes a transaction-scoped advisory lock, so replicas starting together apply each migration
exactly once, and applies what is missing in that same transaction: a schema is never half
migrated. A database whose newest migration is newer than this code knows stops the opening
(an older release must not write rows it does not understand).

Columns hold what ``_integrity`` authenticates with the same Python types SQLite hands back
(``exportable`` an integer, times ``double precision``), so a row's MAC is the same in either
store and ``sealflow keystore migrate`` copies rows verbatim.
"""

from __future__ import annotations

import time
from collections.abc import Mapping

import psycopg

from ._integrity import SCHEMA_VERSION, Integrity
from .errors import KeyStoreUnavailable

# Any constant: the one lock that serialises schema changes of every sealflow on this database.
_LOCK = 0x5EA1F10
CHANNEL = "sealflow_keystore"

MIGRATIONS: tuple[tuple[str, tuple[str, ...]], ...] = (
    (
        "keys, key versions, tokens, the change counter",
        (
            "CREATE TABLE sealflow_meta (key text PRIMARY KEY, value bytea NOT NULL)",
            # mac: _integrity's MAC over the other columns, in KEY_ROW.columns order.
            "CREATE TABLE sealflow_keys (name text PRIMARY KEY, algorithm text NOT NULL,"
            " exportable integer NOT NULL, min_decryption_version bigint NOT NULL,"
            " created_at double precision NOT NULL, mac bytea NOT NULL)",
            # Rows are deleted only with their key (delete_key, deletion_allowed set), never
            # changed; the primary key refuses reuse while the key lives.
            "CREATE TABLE sealflow_key_versions (name text NOT NULL REFERENCES sealflow_keys,"
            " version bigint NOT NULL CHECK (version BETWEEN 1 AND 4294967295),"
            " wrapped bytea NOT NULL, created_at double precision NOT NULL,"
            " PRIMARY KEY (name, version))",
            # seq: creation order, whatever the clocks of the replicas say; not authenticated.
            "CREATE TABLE sealflow_tokens (seq bigserial UNIQUE, id text PRIMARY KEY,"
            " digest bytea NOT NULL UNIQUE, scopes text NOT NULL, label text NOT NULL,"
            " created_at double precision NOT NULL, revoked_at double precision,"
            " mac bytea NOT NULL)",
            # Bumped by every write that changes what a cache holds; the poll compares it.
            "CREATE TABLE sealflow_changes (id integer PRIMARY KEY CHECK (id = 1),"
            " generation bigint NOT NULL)",
            "INSERT INTO sealflow_changes VALUES (1, 0)",
        ),
    ),
    (
        "usage limits and usage per key version",
        (
            # mac: over the other columns, in LIMITS_ROW.columns order. No row: the defaults.
            "CREATE TABLE sealflow_key_limits (name text PRIMARY KEY REFERENCES sealflow_keys,"
            " max_encryptions bigint NOT NULL, auto_rotate_period double precision NOT NULL,"
            " mac bytea NOT NULL)",
            # Sealings reserved (never fewer than made) and plaintext bytes; no MAC: a counter
            # that UPDATE raises cannot carry one (docs/SERVICE.md, Usage).
            "CREATE TABLE sealflow_usage (name text NOT NULL, version bigint NOT NULL,"
            " reserved bigint NOT NULL, bytes bigint NOT NULL, PRIMARY KEY (name, version),"
            " FOREIGN KEY (name, version) REFERENCES sealflow_key_versions)",
        ),
    ),
    (
        "Transit policy per key: min_encryption_version, deletion_allowed",
        (
            # mac: over the other columns, in POLICY_ROW.columns order. No row:
            # min_encryption_version 0, deletion not allowed (what every key had before).
            "CREATE TABLE sealflow_key_policy (name text PRIMARY KEY REFERENCES sealflow_keys,"
            " min_encryption_version bigint NOT NULL, deletion_allowed integer NOT NULL,"
            " mac bytea NOT NULL)",
        ),
    ),
    (
        "Transit policy per key: made_exportable (a key made exportable after its creation)",
        (
            # Set only by keys/:name/config (never cleared); the row's MAC then covers it
            # (_integrity, POLICY_EXPORTABLE_ROW). Rows written before keep 0 and their MAC.
            "ALTER TABLE sealflow_key_policy ADD COLUMN made_exportable integer NOT NULL DEFAULT 0",
        ),
    ),
    (
        "the audit table: every replica's audit records (SEALFLOW_AUDIT_POSTGRES)",
        (
            # _pg_audit writes it. id: the order of arrival; line: the record exactly as
            # chained (json keeps its input text byte for byte, so the chain's hashes verify
            # over what is stored); writer and seq repeat the line's, for the unique key that
            # makes a batch written again (its commit's answer lost) land once. Never updated
            # or deleted: docs/AUDIT.md has the GRANTs that leave the service INSERT only.
            "CREATE TABLE sealflow_audit (id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,"
            " writer text NOT NULL, seq bigint NOT NULL, line json NOT NULL,"
            " UNIQUE (writer, seq))",
        ),
    ),
    (
        "token lifetimes: ttl, expiry, explicit max, renewable, uses, parent, orphan",
        (
            # In the row's MAC with the other columns (_integrity.TOKEN_ROW); rows written
            # before take the defaults (no expiry, no use limit, no parent) and are MAC'd again
            # once, by _token_lifetimes, if they pass their old check.
            "ALTER TABLE sealflow_tokens ADD COLUMN ttl bigint NOT NULL DEFAULT 0,"
            " ADD COLUMN expire_at double precision,"
            " ADD COLUMN explicit_max_ttl bigint NOT NULL DEFAULT 0,"
            " ADD COLUMN renewable integer NOT NULL DEFAULT 0,"
            " ADD COLUMN num_uses bigint NOT NULL DEFAULT 0,"
            " ADD COLUMN uses bigint NOT NULL DEFAULT 0,"
            " ADD COLUMN parent text NOT NULL DEFAULT '',"
            " ADD COLUMN orphan integer NOT NULL DEFAULT 1",
        ),
    ),
    (
        "AppRole: roles and secret ids",
        (
            # _approle_rows; mac: over the other columns, in ROLE_ROW.columns order.
            "CREATE TABLE sealflow_approle_roles (name text PRIMARY KEY,"
            " role_id text NOT NULL UNIQUE, policies text NOT NULL, token_ttl bigint NOT NULL,"
            " token_max_ttl bigint NOT NULL, token_num_uses bigint NOT NULL,"
            " secret_id_ttl bigint NOT NULL, secret_id_num_uses bigint NOT NULL,"
            " secret_id_bound_cidrs text NOT NULL, token_bound_cidrs text NOT NULL,"
            " bind_secret_id integer NOT NULL, created_at double precision NOT NULL,"
            " mac bytea NOT NULL)",
            # mac: in SECRET_ID_ROW.columns order; digest: SHA-256 of the secret id only.
            "CREATE TABLE sealflow_approle_secret_ids (accessor text PRIMARY KEY,"
            " role text NOT NULL, role_born double precision NOT NULL,"
            " digest bytea NOT NULL UNIQUE, created_at double precision NOT NULL,"
            " expire_at double precision, num_uses bigint NOT NULL, uses bigint NOT NULL,"
            " cidrs text NOT NULL, metadata text NOT NULL, mac bytea NOT NULL)",
        ),
    ),
    (
        "Transit's BYOK import: a key's imported and allow_rotation flags",
        (
            # In the key row's MAC when imported is set (_integrity, KEY_IMPORTED_ROW); rows
            # written before keep 0 and their MAC. The wrapping key is a sealflow_meta row.
            "ALTER TABLE sealflow_keys ADD COLUMN imported integer NOT NULL DEFAULT 0,"
            " ADD COLUMN allow_rotation integer NOT NULL DEFAULT 0",
        ),
    ),
    (
        "cert auth: certificate roles",
        (
            # _cert_rows; mac: over the other columns, in CERT_ROLE_ROW.columns order.
            "CREATE TABLE sealflow_cert_roles (name text PRIMARY KEY, certificate text NOT NULL,"
            " allowed_common_names text NOT NULL, allowed_dns_sans text NOT NULL,"
            " allowed_email_sans text NOT NULL, allowed_uri_sans text NOT NULL,"
            " allowed_organizational_units text NOT NULL, policies text NOT NULL,"
            " token_ttl bigint NOT NULL, token_max_ttl bigint NOT NULL,"
            " display_name text NOT NULL, created_at double precision NOT NULL,"
            " mac bytea NOT NULL)",
        ),
    ),
    (
        "Transit policy per key: plaintext_backup (Transit's allow_plaintext_backup)",
        (
            # Set only by Transit's create or config (never cleared); the row's MAC then covers
            # it (_integrity, POLICY_BACKUP_ROW). Rows written before keep 0 and their MAC.
            "ALTER TABLE sealflow_key_policy"
            " ADD COLUMN plaintext_backup integer NOT NULL DEFAULT 0",
        ),
    ),
    (
        "Transit's key lifecycle: a key's min_available_version (trim) and soft_deleted flag",
        (
            # In the policy row's MAC when either is set (_integrity, POLICY_LIFECYCLE_ROW);
            # rows written before keep 0 and their MAC.
            "ALTER TABLE sealflow_key_policy"
            " ADD COLUMN min_available_version bigint NOT NULL DEFAULT 0,"
            " ADD COLUMN soft_deleted integer NOT NULL DEFAULT 0",
        ),
    ),
)


def migrate(
    db: psycopg.Connection[tuple[object, ...]],
    integrity: Integrity,
    where: str,
    meta: Mapping[str, bytes] | None = None,
) -> bool:
    """Bring the schema up to date inside the caller's transaction; True if it was created now.

    KeyStoreUnavailable for a schema newer than this code, or a master key that does not open it.
    """
    db.execute("SELECT pg_advisory_xact_lock(%s)", (_LOCK,))
    db.execute(
        "CREATE TABLE IF NOT EXISTS sealflow_migrations (version integer PRIMARY KEY,"
        " description text NOT NULL, applied_at double precision NOT NULL)"
    )
    row = db.execute("SELECT coalesce(max(version), 0) FROM sealflow_migrations").fetchone()
    current = int(str(row[0])) if row else 0
    if current > len(MIGRATIONS):
        raise KeyStoreUnavailable(
            f"keystore {where} has schema version {current}, newer than this sealflow knows"
            f" ({len(MIGRATIONS)}): upgrade sealflow; nothing was changed"
        )
    for number, (description, statements) in enumerate(MIGRATIONS, start=1):
        if number <= current:
            continue
        for statement in statements:
            db.execute(statement)
        db.execute(
            "INSERT INTO sealflow_migrations VALUES (%s, %s, %s)",
            (number, description, time.time()),
        )
    if current == 0:
        rows = [("schema_version", str(SCHEMA_VERSION).encode()), ("check", integrity.check_blob())]
        with db.cursor() as cur:
            cur.executemany(
                "INSERT INTO sealflow_meta VALUES (%s, %s)", [*rows, *(meta or {}).items()]
            )
    check = db.execute("SELECT value FROM sealflow_meta WHERE key = 'check'").fetchone()
    if check is None or not integrity.opens(check[0]):
        raise KeyStoreUnavailable(f"the master key does not open keystore {where}")
    return current == 0
