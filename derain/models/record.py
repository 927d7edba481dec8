"""The one description of a network: ``{"class_path": ..., "init_args": {...}}``, as LightningCLI writes it.

A network class that inherits ``Recorded`` remembers the arguments its constructor was called with (defaults
filled in), so the record is taken from the call itself and can never miss an option. Weights files and
checkpoints store that record; ``build_network`` rebuilds whatever class it names.

Example:
    >>> from derain.models import DerainNet
    >>> record = network_record(DerainNet(dim=16))
    >>> record["class_path"], record["init_args"]["dim"]
    ('derain.models.net.DerainNet', 16)
    >>> type(build_network(record)).__name__
    'DerainNet'
"""

from __future__ import annotations

import functools
import importlib
import inspect
import json
from typing import Any

from torch import nn

__all__ = ["Recorded", "build_network", "network_record"]


def _jsonable(value: Any) -> Any:
    """Tuples become lists (JSON has no tuples); anything JSON cannot hold is an error naming it."""
    return json.loads(json.dumps(value))


class Recorded:
    """Mixin for network classes: ``self.init_args`` holds the constructor's arguments, JSON-ready.

    Only the most derived class records (a subclass calling ``super().__init__`` does not overwrite its own
    record). Every argument must be JSON-serialisable (ints, floats, strings, bools, lists, dicts, None).
    """

    init_args: dict[str, Any]

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        init = cls.__dict__.get("__init__")
        if init is None:
            return
        signature = inspect.signature(init)

        @functools.wraps(init)
        def recording_init(self, *args: Any, **kw: Any) -> None:
            init(self, *args, **kw)
            if type(self).__init__ is recording_init:
                bound = signature.bind(self, *args, **kw)
                bound.apply_defaults()
                arguments = dict(bound.arguments)
                arguments.pop(next(iter(signature.parameters)))  # self
                try:
                    self.init_args = _jsonable(arguments)
                except TypeError as err:
                    raise TypeError(
                        f"{type(self).__name__}: constructor arguments must be JSON: {err}"
                    ) from None

        cls.__init__ = recording_init  # type: ignore[method-assign]


def network_record(net: nn.Module) -> dict[str, Any]:
    """``{"class_path": "module.Class", "init_args": {...}}`` of a network built from a ``Recorded`` class.

    Raises:
        TypeError: ``net``'s class does not record its arguments (it does not inherit ``Recorded``).
    """
    init_args = getattr(net, "init_args", None)
    if not isinstance(init_args, dict):
        raise TypeError(
            f"{type(net).__name__} does not record its constructor arguments; networks that can be exported "
            "inherit derain.models.Recorded"
        )
    cls = type(net)
    return {"class_path": f"{cls.__module__}.{cls.__qualname__}", "init_args": init_args}


def build_network(record: Any) -> nn.Module:
    """The network a record describes: imports ``class_path`` and calls it with ``init_args``.

    Only classes are built, and only ``torch.nn.Module`` subclasses (a record never names another callable).

    Raises:
        ValueError: the record is malformed, its class cannot be imported or is not a network, or the
            arguments do not fit the class (the message names the class and the argument).
    """
    if not isinstance(record, dict) or not isinstance(record.get("class_path"), str):
        raise ValueError(f"a network record is {{'class_path': str, 'init_args': dict}}, got {record!r}")
    class_path, init_args = record["class_path"], record.get("init_args") or {}
    if not isinstance(init_args, dict):
        raise ValueError(f"{class_path}: init_args should be a dict, got {type(init_args).__name__}")
    module_name, _, name = class_path.rpartition(".")
    try:
        cls = getattr(importlib.import_module(module_name), name) if module_name else None
    except (ImportError, AttributeError) as err:
        raise ValueError(f"cannot import the network class {class_path!r}: {err}") from None
    if not (inspect.isclass(cls) and issubclass(cls, nn.Module)):
        raise ValueError(f"{class_path!r} is not a torch.nn.Module class")
    try:
        return cls(**init_args)
    except (TypeError, ValueError) as err:
        raise ValueError(f"cannot build {class_path} from init_args {init_args}: {err}") from None
