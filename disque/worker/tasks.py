"""Which function handles which queue, and loading ``package.module:function`` targets."""

from __future__ import annotations

import importlib
import inspect
from typing import Any, Callable

from disque.client import Job

Handler = Callable[[Job], Any]


def is_coroutine_handler(func: Callable[..., Any]) -> bool:
    """Whether ``func`` is an ``async def`` (a handler for the asyncio worker)."""
    return inspect.iscoroutinefunction(func) or inspect.iscoroutinefunction(
        getattr(func, "__call__", None))


class TaskRegistry:
    """Queue name → handler; one handler per queue."""

    def __init__(self, coroutines: bool) -> None:
        self.coroutines = coroutines  # True: handlers must be async def; False: plain functions
        self.handlers: dict[str, Handler] = {}

    def add(self, queue: str, func: Handler) -> None:
        """Register ``func`` for ``queue``; a queue has one handler."""
        if not callable(func):
            raise TypeError("a task handler must be callable, not %r" % (func,))
        if is_coroutine_handler(func) != self.coroutines:
            raise TypeError("%s is %s: the %s worker runs %s" % (
                _name(func), "a coroutine function" if not self.coroutines else "not async def",
                "threaded" if not self.coroutines else "asyncio",
                "plain functions" if not self.coroutines else "async def functions"))
        if queue in self.handlers:
            raise ValueError("queue %r already has a handler (%s)"
                             % (queue, _name(self.handlers[queue])))
        self.handlers[queue] = func

    def queues(self) -> list[str]:
        """Every queue with a handler, in registration order."""
        return list(self.handlers)

    def handler(self, queue: str) -> Handler:
        """The handler of ``queue``."""
        return self.handlers[queue]


def load_target(spec: str) -> Callable[..., Any]:
    """The object named by ``package.module:attribute`` (attributes may be dotted)."""
    module_name, sep, attribute = spec.partition(":")
    if not sep or not module_name or not attribute:
        raise ValueError("expected package.module:function, got %r" % spec)
    target: Any = importlib.import_module(module_name)
    for part in attribute.split("."):
        try:
            target = getattr(target, part)
        except AttributeError:
            raise ValueError("%s has no attribute %r" % (module_name, attribute)) from None
    return target


def _name(func: Callable[..., Any]) -> str:
    return "%s.%s" % (getattr(func, "__module__", "?"), getattr(func, "__qualname__", func))
