"""sealflow: an encryption service over OpenSSL's EVP AEAD.

- ``sealflow.native``: the cffi binding (C helpers over libcrypto)
- ``sealflow.engine``: AEAD and C2SP chunked encryption, free of HTTP
- ``sealflow.service``: the HTTP service, keystore, client and CLI
"""

from importlib.metadata import PackageNotFoundError, version

try:
    __version__ = version("sealflow")
except PackageNotFoundError:  # imported from a source tree that was never installed
    __version__ = "0+unknown"

__all__ = ["__version__"]
