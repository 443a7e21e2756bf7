"""The ``pkcs11`` master-key provider: an AES-256 key on a PKCS#11 token (an HSM, SoftHSM2)
that is sensitive and not extractable, so it never leaves the token; the token wraps and
unwraps the keystore's KEK with CKM_AES_GCM.

python-pkcs11 (docs/DEPLOY.md, Dependencies) is imported only when this provider is chosen.
Every failure is one ``KeyStoreUnavailable`` line naming what to fix: the library, the token,
the PIN, the key.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

from sealflow.service.config import Settings

from ._masterkey import read_secret
from .errors import KeyStoreUnavailable

if TYPE_CHECKING:
    import pkcs11
    from pkcs11.types import DecryptMixin, EncryptMixin

_NONCE_LEN = 12
_T = TypeVar("_T")


class Pkcs11Seal:
    """The key ``key_label`` on the token ``token_label`` of the PKCS#11 library ``library``."""

    __slots__ = ("_key_label", "_library", "_pin_file", "_token_label")

    def __init__(self, library: Path, token_label: str, key_label: str, pin_file: Path) -> None:
        self._library = library
        self._token_label = token_label
        self._key_label = key_label
        self._pin_file = pin_file

    @classmethod
    def from_settings(cls, settings: Settings) -> Pkcs11Seal:
        missing = [
            name
            for name, value in (
                ("SEALFLOW_MASTER_KEY_PKCS11_LIBRARY", settings.master_key_pkcs11_library),
                ("SEALFLOW_MASTER_KEY_PKCS11_TOKEN_LABEL", settings.master_key_pkcs11_token_label),
                ("SEALFLOW_MASTER_KEY_PKCS11_PIN_FILE", settings.master_key_pkcs11_pin_file),
            )
            if not value
        ]
        if missing:
            raise KeyStoreUnavailable(f"the pkcs11 master-key provider needs {', '.join(missing)}")
        assert settings.master_key_pkcs11_library is not None
        assert settings.master_key_pkcs11_token_label is not None
        assert settings.master_key_pkcs11_pin_file is not None
        return cls(
            settings.master_key_pkcs11_library,
            settings.master_key_pkcs11_token_label,
            settings.master_key_pkcs11_key_label,
            settings.master_key_pkcs11_pin_file,
        )

    def describe(self) -> dict[str, str]:
        return {"token_label": self._token_label, "key_label": self._key_label}

    def wrap(self, kek: bytes, aad: bytes) -> bytes:
        import pkcs11

        nonce = os.urandom(_NONCE_LEN)

        def encrypt(key: EncryptMixin) -> bytes:
            params = pkcs11.GCMParams(nonce, aad)
            return _one(
                key.encrypt(kek, mechanism=pkcs11.Mechanism.AES_GCM, mechanism_param=params)
            )

        return nonce + self._with_key(encrypt)

    def unwrap(self, blob: bytes, aad: bytes) -> bytes:
        import pkcs11

        nonce, sealed = blob[:_NONCE_LEN], blob[_NONCE_LEN:]

        def decrypt(key: DecryptMixin) -> bytes:
            params = pkcs11.GCMParams(nonce, aad)
            try:
                return _one(
                    key.decrypt(sealed, mechanism=pkcs11.Mechanism.AES_GCM, mechanism_param=params)
                )
            except (pkcs11.exceptions.EncryptedDataInvalid, pkcs11.exceptions.DataLenRange):
                raise KeyStoreUnavailable(
                    f"{self._where()} does not unwrap the keystore's key-encryption key"
                    " (another key sealed it)"
                ) from None

        return self._with_key(decrypt)

    def create_key(self) -> None:
        """Generate the key on the token: AES-256, sensitive, not extractable, for encrypt and
        decrypt only. Refuses (KeyStoreUnavailable) if a key with its label is there."""
        from pkcs11 import Attribute, KeyType, MechanismFlag

        with self._session(rw=True) as session:
            if list(session.get_objects({Attribute.LABEL: self._key_label})):
                raise KeyStoreUnavailable(
                    f"{self._where()} exists; nothing was created (a key that may seal a"
                    " keystore is never replaced)"
                )
            session.generate_key(
                KeyType.AES,
                256,
                label=self._key_label,
                store=True,
                capabilities=MechanismFlag.ENCRYPT | MechanismFlag.DECRYPT,
                template={
                    Attribute.SENSITIVE: True,
                    Attribute.EXTRACTABLE: False,
                    Attribute.TOKEN: True,
                    Attribute.PRIVATE: True,
                },
            )

    def _where(self) -> str:
        return f"PKCS#11 key {self._key_label!r} on token {self._token_label!r}"

    def _with_key(self, use: Callable[[Any], _T]) -> _T:
        import pkcs11

        with self._session(rw=False) as session:
            try:
                key = session.get_key(
                    object_class=pkcs11.ObjectClass.SECRET_KEY,
                    key_type=pkcs11.KeyType.AES,
                    label=self._key_label,
                )
            except pkcs11.exceptions.NoSuchKey:
                raise KeyStoreUnavailable(
                    f"no {self._where()}: create it (`sealflow keystore init-master`) or set"
                    " SEALFLOW_MASTER_KEY_PKCS11_KEY_LABEL"
                ) from None
            except pkcs11.exceptions.MultipleObjectsReturned:
                raise KeyStoreUnavailable(f"more than one {self._where()}") from None
            try:
                return use(key)
            except pkcs11.exceptions.PKCS11Error as exc:
                raise KeyStoreUnavailable(
                    f"{self._where()} refused: {type(exc).__name__}"
                ) from None

    @contextmanager
    def _session(self, rw: bool) -> Iterator[pkcs11.Session]:
        """A logged-in session, and the library loaded for it only: each provider call
        initialises the library and finalises it after, so no session outlives the call."""
        import pkcs11

        pin = read_secret(self._pin_file, f"PKCS#11 PIN file {self._pin_file}").strip()
        try:
            lib = pkcs11.lib(str(self._library))
        except pkcs11.exceptions.PKCS11Error as exc:
            if type(exc) is not pkcs11.exceptions.PKCS11Error:
                # A CKR_ code: loaded, but C_Initialize failed (the token's configuration).
                raise KeyStoreUnavailable(
                    f"PKCS#11 library {self._library} would not initialise:"
                    f" {type(exc).__name__} (check the token's configuration)"
                ) from None
            # The base class: python-pkcs11's loader could not load the file.
            raise KeyStoreUnavailable(
                f"cannot load the PKCS#11 library {self._library}: {_reason(exc)}"
            ) from None
        except (OSError, RuntimeError) as exc:
            raise KeyStoreUnavailable(
                f"cannot load the PKCS#11 library {self._library}: {_reason(exc)}"
            ) from None
        try:
            with self._login(lib.get_token, rw, pin) as session:
                yield session
        finally:
            pkcs11.unload(str(self._library))

    def _login(self, get_token: Callable[..., pkcs11.Token], rw: bool, pin: str) -> pkcs11.Session:
        import pkcs11

        try:
            token = get_token(token_label=self._token_label)
        except pkcs11.exceptions.NoSuchToken:
            raise KeyStoreUnavailable(
                f"no PKCS#11 token labelled {self._token_label!r} in {self._library}"
            ) from None
        except pkcs11.exceptions.PKCS11Error as exc:
            raise KeyStoreUnavailable(
                f"PKCS#11 library {self._library} failed: {type(exc).__name__}"
            ) from None
        try:
            return token.open(rw=rw, user_pin=pin)
        except (pkcs11.exceptions.PinIncorrect, pkcs11.exceptions.PinLenRange):
            raise KeyStoreUnavailable(
                f"PKCS#11 token {self._token_label!r} refused the PIN in {self._pin_file}"
                " (wrong PIN)"
            ) from None
        except pkcs11.exceptions.PinLocked:
            raise KeyStoreUnavailable(
                f"PKCS#11 token {self._token_label!r} has locked its user PIN"
            ) from None
        except pkcs11.exceptions.PKCS11Error as exc:
            raise KeyStoreUnavailable(
                f"PKCS#11 token {self._token_label!r} refused a session: {type(exc).__name__}"
            ) from None


def _one(out: bytes | Iterator[bytes]) -> bytes:
    # python-pkcs11 answers one bytes for one input (an iterator only for an iterable input).
    return out if isinstance(out, bytes) else b"".join(out)


def _reason(exc: BaseException) -> str:
    # One line: a loader's message may span lines.
    return " ".join(str(exc).split()) or type(exc).__name__
