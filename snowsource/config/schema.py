"""What the model looks like from the YAML side: keys, sections, secrets, table maps.

The sources (which environment variable is which key, where a ``.file`` may stand) and the
error messages (which keys are allowed here, whether a value may be echoed) both ask these
questions; the answers come from the models themselves, so a new key needs no second listing.
Every question names the model it is asked of (``root`` for a path from the top): the root
``Settings`` picks its sources from ``sources.py``, which asks these questions in turn, so this
module must not import it.
"""

from __future__ import annotations

from functools import cache
from types import NoneType, UnionType
from typing import Annotated, Any, Union, get_args, get_origin

from pydantic import BaseModel, SecretStr
from pydantic.fields import FieldInfo

from snowsource.config.fields import FILE_SUFFIX

Loc = tuple[str | int, ...]


@cache
def fields_by_key(model: type[BaseModel]) -> dict[str, FieldInfo]:
    """The model's YAML keys and their fields (derived fields such as a table's alias left out)."""
    return {
        (info.alias or name): info for name, info in model.model_fields.items() if not info.exclude
    }


def _union_members(annotation: Any) -> tuple[Any, ...]:
    """The members of ``X | Y`` (or ``(X,)``), each stripped of ``Annotated`` metadata."""
    if get_origin(annotation) is Annotated:
        return _union_members(get_args(annotation)[0])
    if get_origin(annotation) in (Union, UnionType):
        return tuple(member for arg in get_args(annotation) for member in _union_members(arg))
    return (annotation,)


def model_of(annotation: Any) -> type[BaseModel] | None:
    """The section model of a field, if it is one."""
    for member in _union_members(annotation):
        if isinstance(member, type) and issubclass(member, BaseModel):
            return member
    return None


def dict_model_of(annotation: Any) -> type[BaseModel] | None:
    """The value model of ``dict[str, Model]`` (``snow.tables``), else None."""
    for member in _union_members(annotation):
        if get_origin(member) is dict:
            return model_of(get_args(member)[1])
    return None


def is_complex(annotation: Any) -> bool:
    """Whether the environment gives this key as JSON (a list, a mapping or a section)."""
    return any(
        get_origin(member) in (dict, list) or model_of(member) is not None
        for member in _union_members(annotation)
    )


def admits_none(annotation: Any) -> bool:
    """Whether ``null`` is a valid value."""
    return NoneType in _union_members(annotation)


def is_secret(annotation: Any) -> bool:
    """Whether the field holds a secret (and so also accepts ``<key>.file``)."""
    return any(
        isinstance(member, type) and issubclass(member, SecretStr)
        for member in _union_members(annotation)
    )


@cache
def keys_with_files(model: type[BaseModel]) -> tuple[str, ...]:
    """Every key the sources accept in ``model``: its fields plus ``<secret>.file``."""
    keys: list[str] = []
    for key, info in fields_by_key(model).items():
        keys.append(key)
        if is_secret(info.annotation):
            keys.append(key + FILE_SUFFIX)
    return tuple(keys)


@cache
def holds_secret(model: type[BaseModel]) -> bool:
    """Whether a secret key lies anywhere in this section."""
    for info in fields_by_key(model).values():
        nested = model_of(info.annotation) or dict_model_of(info.annotation)
        if is_secret(info.annotation) or (nested is not None and holds_secret(nested)):
            return True
    return False


def model_at(root: type[BaseModel], loc: Loc) -> type[BaseModel] | None:
    """The model that holds the keys at ``loc`` (a pydantic error location), if any."""
    model: type[BaseModel] | None = root
    parts = list(loc)
    while parts and model is not None:
        key = parts.pop(0)
        info = fields_by_key(model).get(str(key))
        if info is None:
            return None
        value_model = dict_model_of(info.annotation)
        if value_model is not None:
            if not parts:
                return None
            parts.pop(0)  # the alias
            model = value_model
        else:
            model = model_of(info.annotation)
    return model


def field_at(root: type[BaseModel], loc: Loc) -> FieldInfo | None:
    """The field at ``loc``, None for an unknown key or a table alias."""
    if not loc:
        return None
    model = model_at(root, loc[:-1])
    return fields_by_key(model).get(str(loc[-1])) if model is not None else None


def aliased_loc(root: type[BaseModel], loc: Loc) -> Loc:
    """``loc`` with field names replaced by YAML keys (pydantic reports a default by its name)."""
    out: list[str | int] = []
    model: type[BaseModel] | None = root
    expect_alias = False
    for part in loc:
        if expect_alias or model is None or not isinstance(part, str):
            out.append(part)
            expect_alias = False
            continue
        info = fields_by_key(model).get(part)
        if info is None and part in model.model_fields:
            info = model.model_fields[part]
            part = info.alias or part  # noqa: PLW2901 - the key replaces the name on purpose
        out.append(part)
        if info is None:
            model = None
        elif (value_model := dict_model_of(info.annotation)) is not None:
            model, expect_alias = value_model, True
        else:
            model = model_of(info.annotation)
    return tuple(out)
