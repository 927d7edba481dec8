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
import sys
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
        if any(p.kind is p.VAR_POSITIONAL for p in signature.parameters.values()):
            raise TypeError(f"{cls.__qualname__}.__init__ takes *args: a record needs named arguments")
        var_keyword = [p.name for p in signature.parameters.values() if p.kind is p.VAR_KEYWORD]

        @functools.wraps(init)
        def recording_init(self, *args: Any, **kw: Any) -> None:
            init(self, *args, **kw)
            if type(self).__init__ is recording_init:
                bound = signature.bind(self, *args, **kw)
                bound.apply_defaults()
                arguments = dict(bound.arguments)
                arguments.pop(next(iter(signature.parameters)))  # self
                for name in var_keyword:  # **options are recorded as the keywords they were
                    arguments.update(arguments.pop(name, {}))
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
    if "<locals>" in cls.__qualname__ or "." in cls.__qualname__ or cls.__module__ == "__main__":
        raise TypeError(
            f"{cls.__module__}.{cls.__qualname__} cannot be imported by name: define network classes at the top "
            "level of an importable module"
        )
    return {"class_path": f"{cls.__module__}.{cls.__qualname__}", "init_args": init_args}


def build_network(record: Any) -> nn.Module:
    """The network a record describes: finds ``class_path`` and calls it with ``init_args``.

    A record comes from a file, so it is not trusted with imports: derain's own modules are imported on demand,
    any other module only if it is imported already (the program that defined the network imported it; a
    weights file can never make derain import code). Only ``Recorded`` network classes are built.

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
    own = module_name == "derain" or module_name.startswith("derain.")
    if module_name not in sys.modules and not own:
        raise ValueError(
            f"the network class {class_path!r} is outside derain and its module is not imported: import "
            f"{module_name} before loading (a weights file does not make derain import code)"
        )
    try:
        cls = getattr(importlib.import_module(module_name), name) if module_name else None
    except (ImportError, AttributeError) as err:
        raise ValueError(f"cannot import the network class {class_path!r}: {err}") from None
    if not (inspect.isclass(cls) and issubclass(cls, nn.Module) and issubclass(cls, Recorded)):
        raise ValueError(f"{class_path!r} is not a network class (a torch.nn.Module that inherits Recorded)")
    try:
        return cls(**init_args)
    except Exception as err:  # noqa: BLE001 - whatever the constructor raises, it is this record's fault
        raise ValueError(f"cannot build {class_path} from init_args {init_args}: {err}") from None
