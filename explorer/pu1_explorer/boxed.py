"""Calling a kernel that was there before from a Python kernel that wraps it.

A Python kernel registered with `with_keyset=True` receives a scalar that the
dispatcher carried as a "wrapped number" tensor (`x * 2.0` reaches `mul.Tensor`
with a 0-dim tensor) as a plain Python number. Handing that number back to the
original kernel fails ("Expected a value of type 'Tensor'"), so it is wrapped back.
"""
from __future__ import annotations

import functools
from typing import Any

import torch

NUMBERS = (int, float, bool, complex)


def native_helper():
    """The explorer's compiled helper, built at install time."""
    try:
        from pu1_explorer import _native as native
    except ImportError as error:
        raise ImportError(
            f"pu1_explorer: the compiled helper pu1_explorer._native is missing or broken ({error}); rebuild it "
            "from the project folder with `make setup` or `pip install --no-build-isolation -e .`"
        ) from None
    return native


TENSOR_TYPES = frozenset({"Tensor", "Optional[Tensor]"})
TENSOR_LIST_TYPES = frozenset({"List[Tensor]", "List[Optional[Tensor]]"})


@functools.lru_cache(maxsize=None)
def tensor_arguments(operator: str) -> tuple[dict[int, bool], dict[str, bool], tuple[bool | None, ...]]:
    """Where the schema has tensors: argument positions and keyword names (True for a list of tensors), and
    per result True (a list of tensors), False (a tensor) or None (no tensor)."""
    namespace, _, name = operator.partition("::")
    base, _, overload = name.partition(".")
    schema = getattr(getattr(getattr(torch.ops, namespace), base), overload or "default")._schema
    positions, names = {}, {}
    for index, argument in enumerate(schema.arguments):
        kind = str(argument.type)
        if kind in TENSOR_TYPES or kind in TENSOR_LIST_TYPES:
            if not argument.kwarg_only:
                positions[index] = kind in TENSOR_LIST_TYPES
            names[argument.name] = kind in TENSOR_LIST_TYPES
    returns = tuple(str(result.type) in TENSOR_LIST_TYPES if str(result.type) in TENSOR_TYPES | TENSOR_LIST_TYPES
                    else None for result in schema.returns)
    return positions, names, returns


def _rewrap(value: Any, is_list: bool, wrapped_number: Any) -> Any:
    if is_list and isinstance(value, (list, tuple)) and any(type(item) in NUMBERS for item in value):
        return [wrapped_number(item) if type(item) in NUMBERS else item for item in value]
    return wrapped_number(value) if type(value) in NUMBERS else value


def rewrap_numbers(operator: str, arguments: tuple, keyword_arguments: dict) -> tuple[tuple, dict]:
    """The arguments with every plain number in a tensor slot (alone or in a list) turned back into a wrapped-number tensor."""
    if not keyword_arguments and not any(type(value) in NUMBERS or isinstance(value, list) for value in arguments):
        return arguments, keyword_arguments
    positions, names, _ = tensor_arguments(operator)
    wrapped_number = native_helper().wrapped_number
    arguments = tuple(_rewrap(value, positions[i], wrapped_number) if i in positions else value
                      for i, value in enumerate(arguments))
    if keyword_arguments:
        keyword_arguments = {n: _rewrap(v, names[n], wrapped_number) if n in names else v
                             for n, v in keyword_arguments.items()}
    return arguments, keyword_arguments


def call_original(original: Any, operator: str, keyset: Any, arguments: tuple, keyword_arguments: dict) -> Any:
    """Call the kernel a Python wrapper replaced with the arguments it received; numbers in tensor results
    (a wrapped number passed through, as `to` does) go back as wrapped-number tensors too."""
    arguments, keyword_arguments = rewrap_numbers(operator, arguments, keyword_arguments)
    result = original.call_boxed(keyset, *arguments, **keyword_arguments)
    returns = tensor_arguments(operator)[2]
    if len(returns) == 1:
        if returns[0] is not None and (type(result) in NUMBERS or isinstance(result, list)):
            return _rewrap(result, returns[0], native_helper().wrapped_number)
    elif isinstance(result, tuple) and any(type(item) in NUMBERS or isinstance(item, list) for item in result):
        wrapped_number = native_helper().wrapped_number
        return tuple(_rewrap(item, is_list, wrapped_number) if is_list is not None else item
                     for item, is_list in zip(result, returns))
    return result
