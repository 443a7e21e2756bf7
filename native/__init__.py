"""sealflow's native binding: a cffi extension over OpenSSL libcrypto's EVP AEAD API.

The compiled module is ``native._sealflow_native``; only ``engine._native`` imports it.
"""

MIN_OPENSSL_VERSION = 0x300000D0
MIN_OPENSSL_VERSION_TEXT = "3.0.13"
