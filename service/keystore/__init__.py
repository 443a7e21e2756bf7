"""The keystore: named, versioned keys wrapped under the master key, and bearer tokens.

Nothing here knows about HTTP; the server, the CLI and the tests all use this package.
"""

from ._approle_api import RoleInfo, SecretIdInfo
from ._backup import backup as backup_keystore
from ._backup import read_backup, read_backup_file, restore_postgres, restore_sqlite
from ._backup_file import backup_record, open_backup
from ._base import (
    SWEEP_AFTER,
    ChangeHook,
    KeyInfo,
    KeyStore,
    KeyStoreHealth,
    KeyVersionInfo,
    Lifetimes,
    Renewal,
    RestoredKey,
    Slot,
    TokenInfo,
    VersionUsage,
    export_material,
    valid_accessor,
    valid_key_name,
    valid_scope,
    valid_secret,
)
from ._cert_api import CertRoleInfo
from ._hmac_keys import version_hmac_key
from ._kek import Keys
from ._key_types import (
    HMAC_MAX_SIZE,
    HMAC_MIN_SIZE,
    KDF_COUNTER,
    KDF_HKDF,
    KeyType,
    hmac_key,
)
from ._key_types import make as make_key_type
from ._key_types import public_key as version_public_key
from ._masterkey import KeyWrapper, create_master_key_file, load_master_key, read_secret
from ._migrate import Migrated
from ._migrate import migrate as migrate_keystore
from ._pg_audit import TABLE as AUDIT_TABLE
from ._pg_audit import PostgresSink, audit_rows
from ._pkcs11_seal import Pkcs11Seal
from ._postgres import PostgresKeyStore, redact
from ._provision import (
    audit_table,
    describe,
    keystore_keys,
    keystore_record,
    keystore_url,
    open_store,
    prepare,
)
from ._public_keys import RSA_TYPES, PublicKeyInfo
from ._root_scopes import ROOT_SCOPES
from ._rotate_master import Rotated, current_provider, rotate_master
from ._seals import HELD_KEYS, Seal, seal_for
from ._seals import PROVIDERS as MASTER_KEY_PROVIDERS
from ._snapshot import Snapshot
from ._sqlite import SQLiteKeyStore
from ._unlock import backup_keys, migration_keys
from ._usage import SCARCE, Lease, UsageMeter, next_rotation, sealable
from .errors import (
    MISSING_CONTEXT,
    SOFT_DELETED,
    BackupRefused,
    DeletionNotAllowed,
    InvalidRequest,
    KeyExists,
    KeyNotFound,
    KeySoftDeleted,
    KeyStoreCorrupt,
    KeyStoreError,
    KeyStoreUnavailable,
    LoginRefused,
    NotExportable,
    NotRenewable,
    RoleNotFound,
    TokenExpired,
    TokenNotFound,
    VersionRetired,
    VersionUsedUp,
    WouldWait,
    WrongKeyType,
)

__all__ = [
    "AUDIT_TABLE",
    "HELD_KEYS",
    "HMAC_MAX_SIZE",
    "HMAC_MIN_SIZE",
    "KDF_COUNTER",
    "KDF_HKDF",
    "MASTER_KEY_PROVIDERS",
    "MISSING_CONTEXT",
    "ROOT_SCOPES",
    "RSA_TYPES",
    "SCARCE",
    "SOFT_DELETED",
    "SWEEP_AFTER",
    "BackupRefused",
    "CertRoleInfo",
    "ChangeHook",
    "DeletionNotAllowed",
    "InvalidRequest",
    "KeyExists",
    "KeyInfo",
    "KeyNotFound",
    "KeySoftDeleted",
    "KeyStore",
    "KeyStoreCorrupt",
    "KeyStoreError",
    "KeyStoreHealth",
    "KeyStoreUnavailable",
    "KeyType",
    "KeyVersionInfo",
    "KeyWrapper",
    "Keys",
    "Lease",
    "Lifetimes",
    "LoginRefused",
    "Migrated",
    "NotExportable",
    "NotRenewable",
    "Pkcs11Seal",
    "PostgresKeyStore",
    "PostgresSink",
    "PublicKeyInfo",
    "Renewal",
    "RestoredKey",
    "RoleInfo",
    "RoleNotFound",
    "Rotated",
    "SQLiteKeyStore",
    "Seal",
    "SecretIdInfo",
    "Slot",
    "Snapshot",
    "TokenExpired",
    "TokenInfo",
    "TokenNotFound",
    "UsageMeter",
    "VersionRetired",
    "VersionUsage",
    "VersionUsedUp",
    "WouldWait",
    "WrongKeyType",
    "audit_rows",
    "audit_table",
    "backup_keys",
    "backup_keystore",
    "backup_record",
    "create_master_key_file",
    "current_provider",
    "describe",
    "export_material",
    "hmac_key",
    "keystore_keys",
    "keystore_record",
    "keystore_url",
    "load_master_key",
    "make_key_type",
    "migrate_keystore",
    "migration_keys",
    "next_rotation",
    "open_backup",
    "open_store",
    "prepare",
    "read_backup",
    "read_backup_file",
    "read_secret",
    "redact",
    "restore_postgres",
    "restore_sqlite",
    "rotate_master",
    "seal_for",
    "sealable",
    "valid_accessor",
    "valid_key_name",
    "valid_scope",
    "valid_secret",
    "version_hmac_key",
    "version_public_key",
]
