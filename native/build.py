"""cffi build script (API, out-of-line mode) for sealflow's native AEAD helpers.

Used by setup.py's ``cffi_modules``; it is not installed. The C source is
``sealflow_native.c`` beside this file.
"""

from pathlib import Path

from cffi import FFI

HERE = Path(__file__).resolve().parent

CDEF = """
int sf_init(void);
unsigned long sf_openssl_version_num(void);
void sf_stats_read(uint64_t *out);
void sf_set_strategy(int strategy);
uintptr_t sf_thread_context_id(int alg);
void sf_thread_release(void);

int sf_seal(int alg, const char *key, const char *nonce, const char *aad, size_t aadlen,
            const char *in, size_t inlen, char *out);
int sf_open(int alg, const char *key, const char *nonce, const char *aad, size_t aadlen,
            const char *in, size_t ctlen, char *out);
const char *sf_seal_small(int alg, const char *key, const char *nonce, const char *aad,
                          size_t aadlen, const char *in, size_t inlen);
const char *sf_open_small(int alg, const char *key, const char *nonce, const char *aad,
                          size_t aadlen, const char *in, size_t ctlen);
int sf_scratch_error(void);
int sf_chunks_seal(int alg, const char *key, const char *base_nonce, uint64_t counter,
                   const char *in, size_t inlen, int final, char *out);
int sf_chunks_open(int alg, const char *key, const char *base_nonce, uint64_t counter,
                   const char *in, size_t inlen, int final, char *out);
void sf_cleanse(char *buf, size_t len);

unsigned long ERR_get_error(void);
void ERR_error_string_n(unsigned long e, char *buf, size_t len);
void ERR_clear_error(void);
"""

ffi = FFI()
ffi.cdef(CDEF)
ffi.set_source(
    "native._sealflow_native",
    (HERE / "sealflow_native.c").read_text(),
    libraries=["crypto"],
    extra_compile_args=["-O2", "-Wall", "-Wextra", "-Werror=implicit-function-declaration"],
)

if __name__ == "__main__":
    ffi.compile(verbose=True)
