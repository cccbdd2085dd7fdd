"""``snow.discover`` (SPEC §15.2): which tables of the instance to stream beside ``snow.tables``.

The selection keys are checked here; ``template`` (any per-table key except ``name`` and
``topic``) is checked against the table model by ``Settings`` once the top-level defaults a
table inherits are known (``config.discovered``).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Annotated, Any, Final

from pydantic import BeforeValidator, Field, field_validator

from snowsource.config.fields import PROBLEMS_ERROR, PositiveInt, problems_error
from snowsource.config.section import Section
from snowsource.core.db_views import ViewCursor
from snowsource.core.discovery import DiscoverRules

__all__ = ["TEMPLATE_FORBIDDEN", "DiscoverConfig", "template_problems", "view_problem"]

#: The per-table keys a template may not set: every discovered table has its own.
TEMPLATE_FORBIDDEN: Final = ("name", "topic")


def _names(value: Any) -> Any:
    # A single glob is a list of one; null is the default.
    if value is None:
        return []
    return [value] if isinstance(value, str) else value


Globs = Annotated[list[Annotated[str, Field(min_length=1)]], BeforeValidator(_names)]


class DiscoverConfig(Section):
    """``snow.discover``: include/exclude globs, ``extends``, views, interval, template."""

    include: Globs = Field(default_factory=lambda: ["*"])
    exclude: Globs = Field(default_factory=list)
    extends: Globs = Field(default_factory=list)
    views: bool = False
    interval_seconds: PositiveInt = 3600
    template: Annotated[dict[str, Any], BeforeValidator(lambda v: {} if v is None else v)] = Field(
        default_factory=dict
    )

    @field_validator("template")
    @classmethod
    def _no_name_or_topic(cls, value: dict[str, Any]) -> dict[str, Any]:
        found = [key for key in TEMPLATE_FORBIDDEN if key in value]
        if found:
            raise problems_error(
                (
                    key,
                    "a discovered table's name and topic are its own (topic: "
                    "{topic.prefix}{name}); list the table under snow.tables to set them",
                )
                for key in found
            )
        return value

    @property
    def rules(self) -> DiscoverRules:
        """The selection rules of ``core.discovery``."""
        return DiscoverRules(
            include=tuple(self.include),
            exclude=tuple(self.exclude),
            extends=tuple(self.extends),
            views=self.views,
        )


def template_problems(errors: Iterable[Mapping[str, Any]]) -> list[tuple[str, str]]:
    """pydantic's ``errors`` of a table built from the template as ``(key, message)``, each key
    under ``snow.discover.template`` (a rule across keys names its own key)."""
    found: list[tuple[str, str]] = []
    for error in errors:
        loc = ["snow", "discover", "template", *map(str, error["loc"])]
        if error["type"] == PROBLEMS_ERROR:
            found.extend(
                (".".join([*loc, key]), message) for key, message in error["ctx"]["problems"]
            )
        else:
            found.append((".".join(loc), error["msg"]))
    return found


def view_problem(name: str, view: ViewCursor, errors: Iterable[Mapping[str, Any]]) -> str:
    """Why a discovered database view is SKIPPED: the template's settings cannot read it by its
    prefixed cursor fields (pydantic's ``errors`` of the view's table model)."""
    found = "; ".join(f"{key}: {message}" for key, message in template_problems(errors))
    return (
        f"database view {name} (read by {view.timestamp_field}, {view.id_field}): {found}; "
        "list it under snow.tables with settings a view can have"
    )
