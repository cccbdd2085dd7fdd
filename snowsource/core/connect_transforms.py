"""Kafka Connect single message transforms mapped to field governance (``config import``). Pure.

Two transforms have an equivalent (SPEC §15.2): ``ReplaceField$Value`` (``exclude`` or its old
name ``blacklist`` → ``fields.exclude``; ``include`` or ``whitelist`` → each table's ``fields``)
and ``MaskField$Value`` (``fields`` → ``fields.mask``). Everything else in ``transforms`` (other
transforms, ``renames``, a ``replacement``, a ``predicate``) is reported, key by key, with the
reason, and ends up as a comment in the printed YAML.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Final

_REPLACE_FIELD: Final = "org.apache.kafka.connect.transforms.ReplaceField$Value"
_MASK_FIELD: Final = "org.apache.kafka.connect.transforms.MaskField$Value"
# The default cursor fields and sys_mod_count: never governed (a table's own cursor fields are
# added by the caller).
_PROTECTED: Final = frozenset({"sys_id", "sys_updated_on", "sys_mod_count"})


@dataclass
class MappedTransforms:
    """What the transforms of a connector config become."""

    exclude: list[str] = field(default_factory=list)
    include: list[str] | None = None
    mask: list[str] = field(default_factory=list)
    unmapped: list[tuple[str, str]] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)


def is_transform_key(key: str) -> bool:
    """Whether ``key`` belongs to Connect's ``transforms`` settings."""
    return key == "transforms" or key.startswith("transforms.")


def _names(value: Any) -> list[str]:
    if isinstance(value, list):
        return [str(item).strip() for item in value if str(item).strip()]
    return [part.strip() for part in str(value).split(",") if part.strip()]


def _keep(
    names: list[str], key: str, out: MappedTransforms, protected: frozenset[str]
) -> list[str]:
    kept = [name for name in names if name not in protected]
    dropped = sorted(set(names) - set(kept))
    if dropped:
        out.notes.append(
            f"{key}: {', '.join(dropped)} left out: snowsource always sends the cursor fields and "
            "sys_mod_count as they are"
        )
    return kept


def map_transforms(
    config: dict[str, Any], protected: frozenset[str] = _PROTECTED
) -> MappedTransforms:
    """Map the ``transforms`` keys of ``config``; ``protected`` are the columns that cannot be
    governed (the tables' cursor fields and ``sys_mod_count``)."""
    out = MappedTransforms()
    aliases = _names(config.get("transforms", ""))
    handled = {"transforms"}
    left: list[str] = []
    for alias in aliases:
        prefix = f"transforms.{alias}."
        options = {k[len(prefix) :]: v for k, v in config.items() if k.startswith(prefix)}
        handled.update(prefix + option for option in options)
        kind = str(options.get("type", "")).strip()
        reason = None
        if kind not in (_REPLACE_FIELD, _MASK_FIELD):
            reason = f"transform {alias!r} ({kind or 'no type'}) has no snowsource equivalent"
        elif "predicate" in options or "negate" in options:
            reason = f"transform {alias!r} has a predicate; governance applies to every record"
        if reason is not None:
            left.append(alias)
            out.unmapped.extend((prefix + option, reason) for option in options)
            continue
        del options["type"]
        if kind == _REPLACE_FIELD:
            _replace_field(alias, options, out, protected)
        else:
            _mask_field(alias, options, out, protected)
    if left:
        out.unmapped.insert(
            0,
            (
                "transforms",
                f"only ReplaceField$Value and MaskField$Value map (to field governance); "
                f"not: {', '.join(left)}",
            ),
        )
    for key in sorted(k for k in config if is_transform_key(k) and k not in handled):
        out.unmapped.append((key, "not a transform listed in transforms"))
    return out


def _replace_field(
    alias: str, options: dict[str, Any], out: MappedTransforms, protected: frozenset[str]
) -> None:
    prefix = f"transforms.{alias}."
    for option, value in options.items():
        if option in ("exclude", "blacklist"):
            out.exclude += _keep(_names(value), prefix + option, out, protected)
        elif option in ("include", "whitelist"):
            names = _names(value)
            out.include = names if out.include is None else [n for n in out.include if n in names]
        else:
            out.unmapped.append(
                (prefix + option, "ReplaceField option without an equivalent (fields keep names)")
            )


def _mask_field(
    alias: str, options: dict[str, Any], out: MappedTransforms, protected: frozenset[str]
) -> None:
    prefix = f"transforms.{alias}."
    for option, value in options.items():
        if option == "fields":
            out.mask += _keep(_names(value), prefix + option, out, protected)
            if "replacement" not in options:
                out.notes.append(
                    f"{prefix}fields: Connect masked these with an empty value; snowsource "
                    "writes '****' for a non-empty value"
                )
        elif option == "replacement":
            out.unmapped.append(
                (prefix + option, "snowsource masks with a fixed '****' (fields.mask)")
            )
        else:
            out.unmapped.append((prefix + option, "MaskField option without an equivalent"))
