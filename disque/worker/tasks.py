"""Which function handles which queue, and loading ``package.module:function`` targets.

Loading a target imports its module; a worker run while that import is under
way (a ``worker.run()`` at module level, unguarded by ``if __name__ ==
"__main__":``) is refused with ``StartedOnImport``: ``disque-worker`` would
otherwise run the module's worker until a first SIGTERM, then its own.
"""

from __future__ import annotations

import importlib
import inspect
from typing import Any, Callable

from disque.client import Job

Handler = Callable[[Job], Any]

_importing: list[str] = []  # modules load_target is importing now, innermost last
_refused: list[str] = []  # modules whose import tried to run a worker


class StartedOnImport(RuntimeError):
    """A worker was run while ``load_target`` imported a target's module."""

    def __init__(self, module: str) -> None:
        self.module = module
        super().__init__(
            "importing %s started a worker (worker.run() at module level?), and disque-worker "
            "runs its own worker for the target: put the module's run() under "
            "'if __name__ == \"__main__\":'" % module)


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
    refused_before = len(_refused)
    _importing.append(module_name)
    try:
        target: Any = importlib.import_module(module_name)
    finally:
        _importing.pop()
    if len(_refused) > refused_before:  # the module caught the refusal and went on
        raise StartedOnImport(_refused[refused_before])
    for part in attribute.split("."):
        try:
            target = getattr(target, part)
        except AttributeError:
            raise ValueError("%s has no attribute %r" % (module_name, attribute)) from None
    return target


def refuse_run_during_import() -> None:
    """Raise ``StartedOnImport`` when called while ``load_target`` imports a module."""
    if _importing:
        _refused.append(_importing[-1])
        raise StartedOnImport(_importing[-1])


def _name(func: Callable[..., Any]) -> str:
    return "%s.%s" % (getattr(func, "__module__", "?"), getattr(func, "__qualname__", func))
