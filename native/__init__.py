"""sealflow's native binding: a cffi extension over OpenSSL libcrypto's EVP AEAD API.

The compiled module is ``sealflow.native._sealflow_native``; only ``sealflow.engine._native``
imports it. Its functions and constants are declared in ``sealflow_native.h``.
"""

MIN_OPENSSL_VERSION_TEXT = "3.0.13"
