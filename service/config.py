"""Service settings: environment variables ``SEALFLOW_*``, each also a ``sealflow serve`` flag."""

from __future__ import annotations

import ipaddress
from pathlib import Path
from typing import Literal

from pydantic import Field, SecretStr, field_validator, model_validator
from pydantic_settings import BaseSettings, PydanticBaseSettingsSource, SettingsConfigDict

from . import config_file
from .durations import parse_duration

MiB = 1 << 20


# First path segments under /v1/ that the native API and the Vault routes outside the mount use.
_NATIVE_V1 = frozenset(("keys", "decrypt", "sys", "auth"))


def networks(text: str) -> tuple[ipaddress.IPv4Network | ipaddress.IPv6Network, ...]:
    """A comma-separated list of addresses and CIDR networks (an address is its /32 or /128)."""
    return tuple(ipaddress.ip_network(item.strip()) for item in text.split(",") if item.strip())


class Settings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="SEALFLOW_", extra="ignore")

    host: str = Field("127.0.0.1", description="address to listen on")
    port: int = Field(8080, ge=0, le=65535, description="port to listen on")
    workers: int = Field(1, ge=1, description="uvicorn worker processes")
    crypto_threads: int = Field(0, ge=0, description="crypto worker threads (0: one per core)")
    context_strategy: Literal["lazy", "hybrid", "eager"] = Field(
        "lazy", description="when native cipher contexts are freed: lazy, hybrid or eager"
    )
    provider: Literal["auto", "native", "cryptography"] = Field(
        "auto", description="AEAD provider: auto (calibrated per algorithm), native, cryptography"
    )
    data_dir: Path = Field(Path(".sealflow"), description="keystore and dev master key")
    keystore_url: SecretStr | None = Field(
        None,
        description="postgresql://... for a keystore shared by replicas on several hosts"
        " (default: SQLite in the data dir); a password in it never shows in logs",
    )
    keystore_url_file: Path | None = Field(
        None,
        description="a file holding the keystore URL (a deployment secret: it has the password)",
    )
    keystore_max_cache_age: float = Field(
        # At least 2 s: the keystore's watcher hears the database once a second.
        30.0,
        ge=2,
        description="seconds a replica may go without hearing from a PostgreSQL keystore; past"
        " them /readyz says not ready and, unless the stale cache setting says serve, every"
        " request with a token gets 503",
    )
    keystore_stale_cache: Literal["refuse", "serve"] = Field(
        "refuse",
        description="what a replica does with requests that carry a token once its PostgreSQL"
        " keystore has been silent longer than the max cache age: refuse (503: a revocation"
        " holds within that age, even while the database is cut off) or serve (from the cache:"
        " available, but a revocation waits for the database)",
    )
    keystore_poll_interval: float = Field(
        0.5,
        gt=0,
        description="seconds between checks for changes of a PostgreSQL keystore while its"
        " notifications are lost",
    )
    master_key: SecretStr | None = Field(
        None,
        description="base64 of 32 bytes; prefer the variable (a flag shows in ps)",
    )
    master_key_file: Path | None = Field(
        None, description="file holding the base64 master key (default: master.key in the data dir)"
    )
    master_key_provider: Literal["file", "env", "pkcs11", "transit"] = Field(
        "file",
        description="what wraps the keystore's key-encryption key: file (the master key"
        " variable if set, else the master key file), env (the master key variable only) or"
        " pkcs11 (an AES-256 key that never leaves a PKCS#11 token or HSM) or transit (a key"
        " of another Vault or OpenBao Transit)",
    )
    master_key_pkcs11_library: Path | None = Field(
        None, description="pkcs11: the token's PKCS#11 library (a .so file)"
    )
    master_key_pkcs11_token_label: str | None = Field(
        None, description="pkcs11: the label of the token that holds the key"
    )
    master_key_pkcs11_key_label: str = Field(
        "sealflow-master", description="pkcs11: the label of the AES-256 key on the token"
    )
    master_key_pkcs11_pin_file: Path | None = Field(
        None, description="pkcs11: a file holding the token's user PIN"
    )
    root_token: SecretStr | None = Field(
        None,
        description="the root token to install on a new keystore instead of printing a new one",
    )
    root_token_file: Path | None = Field(None, description="a file holding the root token")
    master_key_transit_addr: str | None = Field(
        None,
        description="the transit master-key provider: address of the Vault or OpenBao whose"
        " Transit key wraps the keystore's key-encryption key (https://vault:8200)",
    )
    master_key_transit_mount: str = Field(
        "transit",
        pattern=r"^[A-Za-z0-9][A-Za-z0-9_.-]*(/[A-Za-z0-9][A-Za-z0-9_.-]*)*$",
        description="the transit master-key provider: path of the Transit engine",
    )
    master_key_transit_key: str | None = Field(
        None,
        pattern=r"^[A-Za-z0-9][A-Za-z0-9_.-]*$",
        description="the transit master-key provider: name of the sealing key, an AEAD key"
        " (aes256-gcm96, chacha20-poly1305)",
    )
    master_key_transit_token_file: Path | None = Field(
        None,
        description="the transit master-key provider: a file holding the token (read at each"
        " call, so an agent may renew it in place)",
    )
    master_key_transit_ca_file: Path | None = Field(
        None,
        description="the transit master-key provider: PEM bundle of the CAs that sign the"
        " Transit server's certificate (default: the system's)",
    )
    master_key_transit_namespace: str | None = Field(
        None,
        description="the transit master-key provider: the namespace of the Transit engine,"
        " sent as X-Vault-Namespace (Vault Enterprise and OpenBao namespaces)",
    )
    master_key_transit_timeout: float = Field(
        5.0,
        gt=0,
        le=300,
        description="the transit master-key provider: seconds to connect, and to wait for each"
        " read of an answer; a call is never retried",
    )
    token_default_ttl: int = Field(
        0,
        description="lifetime of a token created without one (a duration: 90s, 30m, 1h, 768h, or"
        " seconds); 0: such tokens never expire, unless the max token TTL is set, which is then"
        " their lifetime (Vault's default is 768h)",
    )
    token_max_ttl: int = Field(
        0,
        description="longest a token may live from its creation, renewals included (a duration);"
        " longer lifetimes are capped with Vault's warning; 0: no limit (Vault's default is"
        " 768h); the first-start root token never expires",
    )
    max_single_bytes: int = Field(64 * MiB, ge=0, description="largest single-shot body")
    max_record_bytes: int = Field(
        1 * MiB, ge=0, le=2**32 - 1, description="largest record of a mode=records batch (413)"
    )
    max_batch_records: int = Field(
        16 * 1024 * 1024, ge=1, description="most records in one mode=records request (413)"
    )
    max_json_bytes: int = Field(
        # Room for a 48 MiB plaintext, whose base64 alone is 64 MiB (docs/TRANSIT.md).
        72 * MiB,
        ge=0,
        description="largest JSON body of the Vault-Transit-compatible API (413 beyond)",
    )
    max_batch_items: int = Field(
        # A 64 MiB batch of 64-byte items ({"plaintext": ...} of a 32-byte value): larger than
        # any batch Vault's 32 MiB request limit lets through (docs/TRANSIT.md, Limits).
        1 << 20,
        ge=1,
        description="most items in one Transit batch (400 beyond)",
    )
    transit_mount: str = Field(
        "/v1/transit",
        pattern=r"^/v1/[a-z0-9][a-z0-9_-]*(/[a-z0-9][a-z0-9_-]*)*$",
        description="path of the Vault-Transit-compatible API (docs/TRANSIT.md)",
    )
    small_lane: bool = Field(
        True,
        description="answer a request whose plan is whole-body (a small single-shot encrypt or a"
        " decrypt, a small Transit encrypt) in the HTTP protocol once its body has come"
        " (docs/SERVICE.md); off: every request through the ASGI app",
    )
    max_buffered_bytes: int = Field(
        1024 * MiB,
        ge=0,
        description="memory the buffered requests of a process (single-shot bodies, Transit"
        " bodies and answers) may hold at once (then 503)",
    )
    max_concurrent_requests: int = Field(256, ge=1, description="data requests beyond get 503")
    max_concurrent_per_token: int = Field(
        0,
        ge=0,
        description="requests one token may have in flight (429 beyond); 0: half of "
        "--max-concurrent-requests",
    )
    max_connections: int = Field(
        0,
        ge=0,
        description="connections a process keeps open; beyond, an idle one that never"
        " authenticated is closed first (0: from the descriptor limit, ulimit -n, leaving room"
        " for files, the keystore and spools)",
    )
    max_header_bytes: int = Field(
        16 * 1024,
        ge=1024,
        description="bytes of request line and headers a request may send (431 beyond)",
    )
    header_timeout: float = Field(
        10.0, gt=0, description="seconds a client has to send a request's line and headers"
    )
    keepalive_timeout: float = Field(
        5.0, gt=0, description="seconds an idle connection stays open between requests"
    )
    receive_timeout: float = Field(
        30.0,
        gt=0,
        description="seconds a body may stall, or a reply go unread (408, or the connection "
        "is closed once the reply started)",
    )
    spool_memory_bytes: int = Field(
        2 * MiB,
        ge=0,
        description="output a request-then-response answer holds in memory before it "
        "spools to a temporary file with no name",
    )
    spool_dir: Path | None = Field(
        None, description="where spool files are made (default: the system temp directory)"
    )
    max_spool_bytes: int = Field(
        4096 * MiB,
        ge=0,
        description="disk all spools of a process may use at once (507 beyond)",
    )
    max_spool_request_bytes: int = Field(
        0,
        ge=0,
        description="spool one request may use (413 beyond); 0: --max-spool-bytes",
    )
    shutdown_timeout: float = Field(30.0, ge=0, description="seconds to finish in-flight requests")
    drain_seconds: float = Field(
        0.0, ge=0, description="seconds /readyz answers 503 before the listener closes"
    )
    tls_cert: Path | None = Field(None, description="PEM certificate: serve HTTPS")
    tls_key: Path | None = Field(None, description="PEM private key of --tls-cert")
    tls_client_ca: Path | None = Field(
        None,
        description="PEM bundle of the CAs whose client certificates are accepted: the server"
        " asks each TLS client for a certificate and refuses one these CAs did not issue"
        " (needs --tls-cert; reloaded with the certificate on SIGHUP)",
    )
    tls_client_auth: Literal["optional", "required"] = Field(
        "optional",
        description="with --tls-client-ca: optional (a client may connect without a"
        " certificate) or required (a client without a valid one is refused in the handshake)",
    )
    trusted_proxies: str = Field(
        "",
        description="addresses or CIDR networks, comma-separated, of the proxies in front: only"
        " from such a peer is the client address taken from its Forwarded or X-Forwarded-For"
        " header (for the access log); empty: the peer is the client",
    )
    log_level: Literal["debug", "info", "warning", "error"] = Field(
        "info", description="debug, info, warning or error"
    )
    audit_file: Path | None = Field(
        None,
        description="the audit trail's file (JSON lines, 0600, rotated by size; docs/AUDIT.md)",
    )
    audit_stdout: bool = Field(False, description="write the audit trail to stdout too")
    audit_postgres: bool = Field(
        False,
        description="write the audit trail to a table of the PostgreSQL keystore's database"
        " too, one table for every replica (docs/AUDIT.md); needs a PostgreSQL keystore",
    )
    audit_rotate_bytes: int = Field(
        64 * MiB, ge=4096, description="size at which the audit file is rotated"
    )
    audit_mode: Literal["required", "best_effort"] = Field(
        "required",
        description="required: no success is answered before its audit record is written, and"
        " requests are refused while records cannot be written; best effort: requests go on,"
        " lost records are counted",
    )

    @classmethod
    def settings_customise_sources(
        cls,
        settings_cls: type[BaseSettings],
        init_settings: PydanticBaseSettingsSource,
        env_settings: PydanticBaseSettingsSource,
        dotenv_settings: PydanticBaseSettingsSource,
        file_secret_settings: PydanticBaseSettingsSource,
    ) -> tuple[PydanticBaseSettingsSource, ...]:
        # Flags (the init arguments) > SEALFLOW_* variables > the --config file > defaults.
        toml = config_file.source(settings_cls)
        sources = (init_settings, env_settings, dotenv_settings, file_secret_settings)
        return sources if toml is None else (*sources, toml)

    @field_validator("transit_mount")
    @classmethod
    def _mount_apart(cls, mount: str) -> str:
        # Under /v1/keys or /v1/decrypt the mount would shadow the native API's routes, and
        # sys/ and auth/ hold the Vault routes that live outside the mount (health, lookup-self).
        first = mount.split("/")[2]
        if first in _NATIVE_V1:
            raise ValueError(f"the Transit mount cannot be under /v1/{first} (the native API's)")
        return mount

    @field_validator("trusted_proxies")
    @classmethod
    def _proxies_parse(cls, text: str) -> str:
        # Refused at start, not at the first request: a network with host bits set
        # (10.0.0.1/8) is refused too, as a typo that would trust more than was meant.
        networks(text)
        return text

    @field_validator("token_default_ttl", "token_max_ttl", mode="before")
    @classmethod
    def _duration(cls, value: object) -> int:
        return parse_duration(value)

    @model_validator(mode="after")
    def _default_within_max(self) -> Settings:
        if self.token_max_ttl and self.token_default_ttl > self.token_max_ttl:
            raise ValueError(
                "--token-default-ttl must not exceed --token-max-ttl"
                " (SEALFLOW_TOKEN_DEFAULT_TTL, SEALFLOW_TOKEN_MAX_TTL)"
            )
        return self

    @model_validator(mode="after")
    def _poll_within_cache_age(self) -> Settings:
        # Polling less often than that would make a replica stale between two polls.
        if self.keystore_poll_interval >= self.keystore_max_cache_age:
            raise ValueError(
                "--keystore-poll-interval must be shorter than --keystore-max-cache-age"
                " (SEALFLOW_KEYSTORE_POLL_INTERVAL, SEALFLOW_KEYSTORE_MAX_CACHE_AGE)"
            )
        return self

    @model_validator(mode="after")
    def _tls_pair(self) -> Settings:
        if (self.tls_cert is None) != (self.tls_key is None):
            raise ValueError(
                "--tls-cert and --tls-key (SEALFLOW_TLS_CERT, SEALFLOW_TLS_KEY) go together"
            )
        if self.tls_client_ca is not None and self.tls_cert is None:
            raise ValueError(
                "--tls-client-ca (SEALFLOW_TLS_CLIENT_CA) needs --tls-cert and --tls-key:"
                " client certificates are asked for in a TLS handshake"
            )
        if "tls_client_auth" in self.model_fields_set and self.tls_client_ca is None:
            raise ValueError(
                "--tls-client-auth (SEALFLOW_TLS_CLIENT_AUTH) needs --tls-client-ca: the CAs"
                " a client certificate is checked against"
            )
        return self

    @property
    def trusted_proxy_networks(self) -> tuple[ipaddress.IPv4Network | ipaddress.IPv6Network, ...]:
        return networks(self.trusted_proxies)

    @property
    def keystore_path(self) -> Path:
        return self.data_dir / "keystore.db"

    @property
    def master_key_path(self) -> Path:
        return self.master_key_file or self.data_dir / "master.key"
