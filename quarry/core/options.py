"""Settings a component declares when it registers: its options.

A component — an embedding backend, a sectioner, a source scheme, a format, quarry's own or a
plugin's — names the settings it reads where it registers, the way ``llm``'s models and LanceDB's
embedding functions carry their own options::

    @EMBEDDERS.register("my-api", options=(
        Option("my_api_url", required=True, help="the service's base URL"),
        Option("my_api_key", secret=True, required=True, env=("MY_API_KEY",)),
        Option("my_api_model", default="small", fingerprint=True),
    ))
    def _my_api(settings, **kwargs):
        return MyEmbedder(settings.option("my_api_url"), settings.option("my_api_key"), ...)

and :class:`~quarry.core.settings.Settings` does the rest, with nothing named by hand:

- reads each option like a field: a keyword of ``Settings.from_env`` (or ``quarry.index``), else
  ``QUARRY_<NAME>``, else the ``env`` fallbacks, else ``.env``, else ``default``;
- checks it (type, bounds, choices, required) when the component is chosen, with an error that
  names the variable: ``QUARRY_MY_API_KEY is required by embedding backend 'my-api'``;
- keeps a ``secret`` out of ``repr``, the runs table (``public_dict``), flow parameters and logs;
- puts ``fingerprint`` options in the content fingerprint, so changing one re-processes the
  index, and every option of the embedding backend in the key of its cached client.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from quarry.core.errors import ConfigError

__all__ = ["Option", "parse_value"]

PREFIX = "QUARRY_"
_TRUE = {"1", "true", "yes", "on"}
_FALSE = {"0", "false", "no", "off"}


@dataclass(frozen=True)
class Option:
    """One setting of a component. ``name`` is its settings key (lower case, read from
    ``QUARRY_<NAME>``); ``type`` one of str, int, float, bool."""

    name: str
    type: type = str
    default: Any = None
    help: str = ""
    secret: bool = False  # never shown: repr, public_dict, flow parameters, logs
    fingerprint: bool = False  # shapes the index's contents: part of the content fingerprint
    required: bool = False
    env: tuple[str, ...] = ()  # other variables read when QUARRY_<NAME> is unset (OPENAI_API_KEY …)
    ge: float | None = None
    le: float | None = None
    choices: tuple[Any, ...] = field(default=())

    def __post_init__(self) -> None:
        if not self.name.isidentifier() or self.name != self.name.lower():
            raise ValueError(f"an option's name is a lower-case identifier, got {self.name!r}")
        if self.type not in (str, int, float, bool):
            raise ValueError(f"option {self.name!r}: type must be str, int, float or bool, not {self.type!r}")

    @property
    def variable(self) -> str:
        """The environment variable that sets it."""
        return PREFIX + self.name.upper()

    def lookup(
        self, given: Mapping[str, Any], environ: Mapping[str, str], dotenv: Mapping[str, str]
    ) -> tuple[Any, str]:
        """``(raw value, where it came from)``, or ``(None, "")`` when nothing sets it."""
        if given.get(self.name) is not None:
            return given[self.name], self.name
        for source in (environ, dotenv):
            for name in (self.variable, *self.env):
                value = source.get(name)
                if value not in (None, ""):
                    return value, name
        return None, ""

    def resolve(
        self, given: Mapping[str, Any], environ: Mapping[str, str], dotenv: Mapping[str, str], owner: str
    ) -> Any:
        """The checked value; :class:`ConfigError` naming the variable (or keyword) and ``owner``
        (``embedding backend 'my-api'``) when it is missing or cannot be read."""
        raw, where = self.lookup(given, environ, dotenv)
        if raw is None:
            if self.required:
                also = f" (or {', '.join(self.env)})" if self.env else ""
                raise ConfigError(
                    f"{self.variable}{also} is required by {owner}" + (f": {self.help}" if self.help else "")
                )
            return self.default
        try:
            value = parse_value(self, raw)
        except ValueError as exc:
            shown = "***" if self.secret else repr(raw)
            raise ConfigError(f"{where}={shown} {exc} (an option of {owner})") from None
        if self.secret:
            from quarry.core.logs import add_secret

            add_secret(str(value))
        return value


def parse_value(option: Option, raw: Any) -> Any:
    """``raw`` (a keyword's value or a variable's text) as ``option.type``, within its limits;
    ValueError saying what is accepted."""
    kind = option.type
    if kind is bool:
        if isinstance(raw, bool):
            value: Any = raw
        elif str(raw).strip().lower() in _TRUE:
            value = True
        elif str(raw).strip().lower() in _FALSE:
            value = False
        else:
            raise ValueError("is not a boolean; use one of true/false, 1/0, yes/no, on/off")
    elif kind is int:
        if isinstance(raw, bool) or (isinstance(raw, float) and not raw.is_integer()):
            raise ValueError("is not a whole number")
        try:
            value = int(str(raw).strip()) if not isinstance(raw, (int, float)) else int(raw)
        except ValueError:
            raise ValueError("is not a whole number") from None
    elif kind is float:
        try:
            value = float(raw)
        except (TypeError, ValueError):
            raise ValueError("is not a number") from None
    else:
        value = str(raw)
    if option.ge is not None and value < option.ge:
        raise ValueError(f"is below {option.ge:g}")
    if option.le is not None and value > option.le:
        raise ValueError(f"is above {option.le:g}")
    if option.choices and value not in option.choices:
        raise ValueError(f"is not one of {', '.join(map(str, option.choices))}")
    return value


def dotenv_values(path: str = ".env") -> dict[str, str]:
    """The ``.env`` file of the working directory, as pydantic-settings reads it for the fields."""
    if not os.path.isfile(path):
        return {}
    from dotenv import dotenv_values as read

    return {k: v for k, v in read(path).items() if v is not None}
