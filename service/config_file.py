"""The settings file of ``sealflow serve --config FILE`` (docs/OPERATIONS.md, "Configuration file").

TOML whose top-level keys are the settings' names in lower case, without the ``SEALFLOW_``
prefix (``port = 8443``), read by pydantic-settings' TOML source below the environment and
the flags. The file is named by ``SEALFLOW_CONFIG``, which ``--config`` sets: the worker
processes read their settings from the environment, and find the file the same way.
Read strictly, where pydantic-settings alone would not be: a missing file, a file that is not
TOML and a key that names no setting (a typo would otherwise be ignored) are each refused.
"""

from __future__ import annotations

import os
import tomllib
from pathlib import Path
from typing import TYPE_CHECKING

from pydantic_settings import TomlConfigSettingsSource

if TYPE_CHECKING:
    from pydantic_settings import BaseSettings

VARIABLE = "SEALFLOW_CONFIG"


class ConfigFileError(ValueError):
    """The settings file cannot be used; the message names the file and what is wrong."""


def source(settings_cls: type[BaseSettings]) -> TomlConfigSettingsSource | None:
    """The file named by ``SEALFLOW_CONFIG`` as a settings source, or None without one."""
    name = os.environ.get(VARIABLE)
    if not name:
        return None
    path = Path(name)
    # pydantic-settings reads a missing file as an empty one: a typo in the path would
    # silently start the service on its defaults.
    if not path.is_file():
        raise ConfigFileError(f"{path}: no such file")
    try:
        toml = TomlConfigSettingsSource(settings_cls, toml_file=path)
    except tomllib.TOMLDecodeError as exc:
        raise ConfigFileError(f"{path}: not a valid TOML file: {exc}") from None
    except OSError as exc:
        raise ConfigFileError(f"{path}: {exc.strerror}") from None
    unknown = sorted(set(toml.toml_data) - set(settings_cls.model_fields))
    if unknown:
        raise ConfigFileError(f"{path}: unknown setting {', '.join(map(repr, unknown))}")
    return toml
