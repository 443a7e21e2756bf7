"""cffi build script (API, out-of-line mode) for sealflow's native AEAD helpers.

Used by setup.py's ``cffi_modules``; it is in no package, so it never ships in the wheel.
The cdef is ``native/sealflow_native.h`` itself: the functions and constants Python sees are
the ones the C file is compiled against, written down once.
"""

import os
import shlex
from pathlib import Path

from cffi import FFI

NATIVE = Path(__file__).resolve().parent.parent
HEADER = NATIVE / "sealflow_native.h"

# cffi's cdef parser takes no preprocessor lines but integer #defines: drop the include guard.
CDEF = "\n".join(
    line
    for line in HEADER.read_text().splitlines()
    if not line.startswith(("#ifndef", "#endif", "#define SEALFLOW_NATIVE_H"))
)
# The OpenSSL calls the binding makes itself (draining the error queue).
CDEF += """
unsigned long ERR_get_error(void);
void ERR_error_string_n(unsigned long e, char *buf, size_t len);
void ERR_clear_error(void);
"""

# cffi's generated glue is not written to -Wmissing-prototypes / -Wconversion; our C file is a
# translation unit of its own, so CI's strict flags (SEALFLOW_CFLAGS) cover all of it.
GLUE = """
#include <openssl/err.h>
#include "sealflow_native.h"
#pragma GCC diagnostic ignored "-Wmissing-prototypes"
#pragma GCC diagnostic ignored "-Wconversion"
#pragma GCC diagnostic ignored "-Wsign-conversion"
"""

ffi = FFI()
ffi.cdef(CDEF)
ffi.set_source(
    "sealflow.native._sealflow_native",
    GLUE,
    # setuptools wants a path relative to setup.py's folder, which the build runs from.
    sources=[os.path.relpath(NATIVE / "sealflow_native.c")],
    include_dirs=[os.path.relpath(NATIVE)],
    libraries=["crypto"],
    # SEALFLOW_CFLAGS adds flags; CI builds with -Werror and the warnings docs/ENGINE.md lists.
    extra_compile_args=[
        "-O2",
        "-Wall",
        "-Wextra",
        "-Werror=implicit-function-declaration",
        *shlex.split(os.environ.get("SEALFLOW_CFLAGS", "")),
    ],
)

if __name__ == "__main__":
    ffi.compile(verbose=True)
