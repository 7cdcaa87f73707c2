"""An event type's JSON Schema: checked when it is registered, compiled the same way to check
what is published.

jsonschema-rs compiles it:
- against its metaschema (the draft its ``$schema`` names; 2020-12 without one), so an
  invalid schema is refused at registration rather than failing every publish of its type;
- with a retriever that refuses everything, so a ``$ref`` must point inside the schema
  (``#/$defs/…``): fetching one would reach past ``registry.url_allow_list``;
- with Rust's ``regex`` engine for ``pattern`` and ``patternProperties``, which matches in
  time linear in the text, so no pattern (``^(a+)+$``) can hold a request. Patterns that
  need backtracking, lookaround and backreferences, are refused at registration.
"""

from __future__ import annotations

from typing import Any

import jsonschema_rs

from wayline.core.errors import RejectedInput

Validator = Any  # jsonschema_rs's validator classes (one per draft) share no public base
_REGEX_HINT = " (patterns are matched without backtracking: no lookaround, no backreferences)"


def _refuse(uri: str) -> Any:
    raise RejectedInput(f"Wayline fetches no schema ({uri}): put it under $defs and refer to it as #/$defs/<name>")


def compile_schema(schema: dict[str, Any]) -> Validator:
    try:
        return jsonschema_rs.validator_for(schema, retriever=_refuse, pattern_options=jsonschema_rs.RegexOptions())
    except jsonschema_rs.ValidationError as exc:
        where = "/".join(map(str, exc.instance_path))
        kind = exc.kind
        hint = _REGEX_HINT if isinstance(kind, jsonschema_rs.ValidationErrorKind.Format) and kind.format == "regex" else ""
        raise RejectedInput(
            f"json_schema is not a usable JSON Schema: {f'at {where}: ' if where else ''}{exc.message}{hint}"
        ) from exc


def first_problem(validator: Validator, data: Any) -> str | None:
    """Why ``data`` does not match, as ``data.path: reason``; None when it matches."""
    error = next(validator.iter_errors(data), None)
    if error is None:
        return None
    where = "".join(f"[{part}]" if isinstance(part, int) else f".{part}" for part in error.instance_path)
    return f"data{where}: {error.message}"


__all__ = ["Validator", "compile_schema", "first_problem"]
