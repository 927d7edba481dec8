"""Serving a test page on a free local port without losing a race for it.

A port the OS hands out (bind to port 0) is free at that moment; by the time the server binds it, another
process may have taken it. Gradio then raises ``OSError`` ("Cannot find empty port"): try another port, a few
times, instead of failing the test.
"""

from __future__ import annotations

import contextlib
import socket
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, TypeVar

if TYPE_CHECKING:
    import gradio as gr

ATTEMPTS = 5
PORT_TAKEN = "Cannot find empty port"
"""What gradio says (in its ``OSError``, or on stderr of a ``derain app`` process) when the port was taken."""

Started = TypeVar("Started")


def free_port() -> int:
    """A port that is free on 127.0.0.1 right now (it may be taken again before it is used: see ``on_a_free_port``)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def on_a_free_port(start: Callable[[int], Started], attempts: int = ATTEMPTS) -> tuple[int, Started]:
    """``start(port)`` on a free port; when it raises ``OSError`` (the port was taken between choosing and
    binding), again on another one, up to ``attempts`` times. Gives the port and what ``start`` returned."""
    for attempt in range(attempts):
        port = free_port()
        try:
            return port, start(port)
        except OSError:
            if attempt == attempts - 1:
                raise
    raise AssertionError("unreachable")


@contextlib.contextmanager
def launched(demo: gr.Blocks) -> Iterator[str]:
    """Serve ``demo`` on a free local port (in this process) and give its URL; close it afterwards."""

    def launch(port: int) -> None:
        demo.launch(server_name="127.0.0.1", server_port=port, prevent_thread_lock=True, quiet=True)

    port, _ = on_a_free_port(launch)
    try:
        yield f"http://127.0.0.1:{port}/"
    finally:
        demo.close()
