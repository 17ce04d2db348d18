"""Which HeraldErrors a route can answer, read from the code that raises them.

The OpenAPI declares every error a route can answer, with the codes each status can carry. A
hand-kept list would drift from the code the first time a service gains a `raise`, so the list is
derived: starting from the route's endpoint and its dependencies, follow every call the source
names that resolves to a Herald function (a module's function, a class's method, a method of an
annotated parameter's class) and collect every HeraldError class the visited code mentions
(raised, or kept in a table it raises from). Mentions it only catches are collected too: a
declared code that is never answered costs a client nothing, a missing one misleads it.

Calls through values the source cannot name (`state(request).registry.get(…)`) are not followed;
the always-present errors (401, 422, 503, 500) are declared for every route regardless, and the
contract test run in CI (schemathesis, with each status's codes as an enum) fails on a code this
reading misses.
"""

from __future__ import annotations

import ast
import inspect
import textwrap
import types
import typing
from collections.abc import Callable, Iterable
from functools import cache
from typing import Any

from herald.errors import HeraldError

_PACKAGE = "herald."


def errors_raised(roots: Iterable[Callable[..., Any]]) -> frozenset[type[HeraldError]]:
    """Every HeraldError class reachable from these callables."""
    found: set[type[HeraldError]] = set()
    seen: set[types.CodeType] = set()
    stack = [_function(root) for root in roots]
    while stack:
        function = stack.pop()
        if function is None or function.__code__ in seen:
            continue
        seen.add(function.__code__)
        for referenced in _references(function):
            if isinstance(referenced, type) and issubclass(referenced, HeraldError):
                found.add(referenced)
            elif isinstance(referenced, type) and referenced.__module__.startswith(_PACKAGE):
                # Building one of Herald's own objects runs its checks.
                for method in ("__init__", "__post_init__"):
                    stack.append(_function(referenced.__dict__.get(method)))
            else:
                stack.append(_function(referenced))
    return frozenset(found)


def _function(value: object) -> types.FunctionType | None:
    value = inspect.unwrap(value) if callable(value) else value
    if isinstance(value, (classmethod, staticmethod)):
        value = value.__func__
    if isinstance(value, types.MethodType):
        value = value.__func__
    if isinstance(value, types.FunctionType) and value.__module__.startswith(_PACKAGE):
        return value
    return None


@cache
def _tree(function: types.FunctionType) -> ast.AST | None:
    try:
        return ast.parse(textwrap.dedent(inspect.getsource(function)))
    except (OSError, TypeError, SyntaxError):
        # No source (a frozen build): nothing to follow; the always-present errors still stand.
        return None


def _references(function: types.FunctionType) -> list[object]:
    tree = _tree(function)
    if tree is None:
        return []
    namespace: dict[str, object] = dict(function.__globals__)
    if function.__closure__:
        for name, cell in zip(function.__code__.co_freevars, function.__closure__, strict=True):
            try:
                namespace[name] = cell.cell_contents
            except ValueError:  # an empty cell
                continue
    parameters = _parameter_classes(function)
    owner = _owner(function)
    found: list[object] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Name):
            found.extend(_contents(namespace.get(node.id)))
        elif isinstance(node, ast.Attribute):
            base = _resolve(node.value, namespace, parameters, owner)
            if base is not None:
                found.extend(_contents(getattr(base, node.attr, None)))
    return found


def _resolve(
    node: ast.expr,
    namespace: dict[str, object],
    parameters: dict[str, type],
    owner: type | None,
) -> object | None:
    """The module or class an attribute's base names, when the source says it plainly."""
    if isinstance(node, ast.Name):
        if node.id == "self" and owner is not None:
            return owner
        if node.id in parameters:
            return parameters[node.id]
        value = namespace.get(node.id)
        return value if isinstance(value, (types.ModuleType, type)) else None
    if isinstance(node, ast.Attribute):
        base = _resolve(node.value, namespace, parameters, owner)
        value = getattr(base, node.attr, None) if base is not None else None
        return value if isinstance(value, (types.ModuleType, type)) else None
    return None


def _contents(value: object) -> list[object]:
    """The value itself, or the members of a table of errors kept at module level."""
    if isinstance(value, dict):
        return [*value.keys(), *value.values()]
    if isinstance(value, (tuple, list, frozenset, set)):
        return list(value)
    return [value]


def _parameter_classes(function: types.FunctionType) -> dict[str, type]:
    """Parameters annotated with a Herald class, so `registry.kind(…)` follows Registry.kind."""
    try:
        hints = typing.get_type_hints(function)
    except Exception:  # an annotation that does not resolve at run time: follow nothing
        return {}
    classes: dict[str, type] = {}
    for name, hint in hints.items():
        for candidate in (hint, *typing.get_args(hint)):
            if isinstance(candidate, type) and candidate.__module__.startswith(_PACKAGE):
                classes[name] = candidate
    return classes


def _owner(function: types.FunctionType) -> type | None:
    """The class a method is defined in, for `self.…` calls."""
    path = function.__qualname__.split(".")
    if len(path) < 2 or "<locals>" in path:
        return None
    value: object = inspect.getmodule(function)
    for part in path[:-1]:
        value = getattr(value, part, None)
    return value if isinstance(value, type) else None
