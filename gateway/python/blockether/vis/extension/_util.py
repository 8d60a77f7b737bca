"""Small shared helpers."""

from __future__ import annotations

import inspect


def is_async_callable(value) -> bool:
    """True for coroutine functions and async generators, also behind wrappers."""
    # The `__call__` attribute itself is a candidate (an object whose __call__ is async).
    candidates = [value, getattr(value, "__func__", None),
                  getattr(value, "__call__", None)]  # noqa: B004
    try:
        candidates.append(inspect.unwrap(getattr(value, "__func__", value)))
    except ValueError:
        pass
    return any(c is not None and (inspect.iscoroutinefunction(c) or inspect.isasyncgenfunction(c))
               for c in candidates)


def is_blank(value) -> bool:
    return not isinstance(value, str) or not value.strip()


def require_sync(owner: str, name: str, value, *, exc=ValueError, optional=True):
    """Validate a synchronous callback; ``None`` is allowed when ``optional``."""
    if value is None and optional:
        return
    if not callable(value):
        raise exc(f"{owner} {name} must be a callable")
    if is_async_callable(value):
        raise TypeError(f"{owner} {name} must be a synchronous callable, not async")
