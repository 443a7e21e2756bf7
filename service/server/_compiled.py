"""Whether the compiled modules are the build of the Python beside them.

The small request's modules are compiled by mypyc when the package is built (setup.py,
``[tool.sealflow] compiled`` in pyproject.toml), and Python imports an extension before the
source of the same name. In a checkout installed with ``pip install -e .``, a module edited
since the last build would go on running its old code, silently: the server refuses to start
instead (docs/SERVICE.md, "Compiled modules").
"""

from __future__ import annotations

import sys
from importlib.machinery import EXTENSION_SUFFIXES
from pathlib import Path

# Where installers put packages: a wheel's files there are written one after the other in no
# particular order (the .py may be newer than its extension by a moment), and nobody edits
# them, so only a package imported from elsewhere (an editable install's tree) is checked.
_INSTALLED = frozenset({"site-packages", "dist-packages"})


def stale() -> list[str]:
    """The loaded ``sealflow`` modules, outside an installed package, whose extension is
    older than the source beside it."""
    found = []
    for name, module in list(sys.modules.items()):
        path = getattr(module, "__file__", None) if name.startswith("sealflow.") else None
        suffix = next((s for s in EXTENSION_SUFFIXES if path and path.endswith(s)), None)
        if path is None or suffix is None:
            continue
        source = Path(path[: -len(suffix)] + ".py")
        if _INSTALLED & set(Path(path).parts) or not source.exists():
            continue
        if source.stat().st_mtime > Path(path).stat().st_mtime:
            found.append(name)
    return sorted(found)


def check() -> None:
    """SystemExit naming the stale modules, if any (see ``stale``)."""
    if names := stale():
        raise SystemExit(
            f"sealflow: {', '.join(names)} changed since the package was built, and the built"
            " module would run instead: rebuild (pip install -e .), or build without"
            " compiling (SEALFLOW_COMPILE=0 pip install -e .)"
        )
