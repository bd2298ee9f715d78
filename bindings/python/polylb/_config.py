"""The config string a :class:`Balancer` passes to the library, built from keyword arguments."""

from __future__ import annotations

from typing import List, Mapping, Optional, Union

from ._arguments import ConfigValue, _library_text, _utf8_text
from ._errors import ConfigError
from ._ffi import Status


def _config_value(key: str, value: ConfigValue) -> str:
    # The base classes' own forms: a subclass may print otherwise (NumPy 2's float64 as
    # "np.float64(1.5)", an IntEnum member before Python 3.11 as "Name.MEMBER").
    if isinstance(value, bool):  # before int: bool is an int subclass
        text = "true" if value else "false"
    elif isinstance(value, float):
        text = float.__repr__(value)
    elif isinstance(value, int):
        text = int.__repr__(value)
    elif isinstance(value, str):
        # A str subclass's own form (a `(str, Enum)` member prints as `Zone.US`).
        text = str.__str__(value)
    elif isinstance(value, (bytes, bytearray)):
        # Its text, not its repr (`b'us-east'`), as elsewhere in the binding (UTF-8).
        text = _utf8_text(bytes(value), key)
    else:
        text = str(value)
    if "&" in text:
        # The format has no escaping: an '&' would silently start a new key.
        raise ConfigError(Status.INVALID_CONFIG, f"value of {key!r} contains '&': {text!r}")
    return text


def _config_pair(key: str, value: ConfigValue) -> str:
    if not isinstance(key, str):
        raise TypeError(f"config keys must be str, not {type(key).__name__}: {key!r}")
    if not key or "&" in key or "=" in key:
        raise ConfigError(Status.INVALID_CONFIG, f"invalid config key {key!r}")
    return f"{key}={_config_value(key, value)}"


def build_config(
    loadbalance: Optional[str] = None,
    config: Union[str, bytes, Mapping[str, Optional[ConfigValue]], None] = None,
    params: Optional[Mapping[str, Optional[ConfigValue]]] = None,
) -> bytes:
    """The config string :class:`Balancer` passes to the library, from its arguments.

    Rule for keyword parameters: every ``_`` in the name becomes ``.`` (``hash_nodes=160`` is
    ``hash.nodes=160``), since Dubbo's keys use dots and no key uses an underscore. A key that
    cannot be spelled that way goes in ``config`` (a string, or a mapping whose keys are taken
    verbatim). ``None`` values are left out, meaning "the library's default". Booleans are written
    ``true``/``false``. Order: ``loadbalance``, then ``config``, then the keywords; a key given
    twice is the library's error (``ConfigError``), not silently overridden. A ``loadbalance``
    with an ``=`` is a whole config string, as the other bindings' constructors take one
    (``Balancer("loadbalance=p2c&seed=7")``): no strategy name has one.
    """
    parts: List[bytes] = []
    if isinstance(loadbalance, str) and "=" in loadbalance:
        parts.append(_library_text(loadbalance, "config"))
    elif loadbalance is not None:
        parts.append(_library_text(_config_pair("loadbalance", loadbalance), "config"))
    if isinstance(config, (str, bytes)):
        if config:
            parts.append(_library_text(config, "config"))
    elif config is not None:
        if not isinstance(config, Mapping):
            raise TypeError(
                f"config must be a str, bytes or a mapping of keys to values, not {type(config).__name__}"
            )
        for key, value in config.items():
            if value is not None:
                parts.append(_library_text(_config_pair(key, value), "config"))
    for name, param in (params or {}).items():
        if param is not None:
            parts.append(_library_text(_config_pair(name.replace("_", "."), param), "config"))
    return b"&".join(parts)
