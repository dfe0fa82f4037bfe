"""What to tell a client that sent a field no model has: which one, and the one it likely meant.

``memory_gb: 4`` in a VM's spec is pydantic's "Extra inputs are not permitted"; the answer
says "spec.memory_gb: unknown field; did you mean memory_mib?" instead, from a close match
(difflib) over the field names of the model at that place.
"""

from __future__ import annotations

import difflib
from collections.abc import Sequence
from typing import Any, get_args

from pydantic import BaseModel

__all__ = ["model_at", "unknown_field_message"]

SIMILARITY = 0.6
"""difflib's cutoff: ``memory`` -> ``memory_mib`` is 0.75 (``memory_gb``, 0.84); unrelated names score far below."""


def model_at(model: type[BaseModel], path: Sequence[Any]) -> type[BaseModel] | None:
    """The model that holds the field at ``path`` (list indexes skipped), or None if the path
    leaves the models (a map's key, a value that is no model)."""
    current = model
    for part in path:
        if isinstance(part, int):
            continue  # an item of a list: the list's own model
        field = current.model_fields.get(str(part))
        if field is None:
            field = next((f for f in current.model_fields.values() if f.alias == part), None)
        nested = _model_in(field.annotation) if field is not None else None
        if nested is None:
            return None
        current = nested
    return current


def _model_in(annotation: Any) -> type[BaseModel] | None:
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return annotation
    for argument in get_args(annotation):  # Optional[X], list[X], X | None
        found = _model_in(argument)
        if found is not None:
            return found
    return None


def unknown_field_message(model: type[BaseModel] | None, loc: Sequence[Any]) -> str | None:
    """``unknown field; did you mean memory_mib?`` for an extra field at ``loc`` (without
    ``body``), or None when the model at that place is not known."""
    if model is None or not loc:
        return None
    holder = model_at(model, loc[:-1])
    if holder is None:
        return None
    names = [f.alias or name for name, f in holder.model_fields.items()]
    close = difflib.get_close_matches(str(loc[-1]), names, n=1, cutoff=SIMILARITY)
    if close:
        return f"unknown field; did you mean {close[0]}?"
    return f"unknown field; the fields here are {', '.join(names)}"
