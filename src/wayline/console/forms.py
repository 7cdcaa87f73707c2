"""Reading typed values out of a console form; a value a model cannot take is its to refuse."""

from __future__ import annotations

from starlette.datastructures import FormData

from wayline.core.errors import RejectedInput


def text(form: FormData, name: str) -> str | None:
    """The field's text, stripped; None when the field is absent or blank."""
    value = form.get(name)
    if not isinstance(value, str):
        return None
    return value.strip() or None


def listed(form: FormData, name: str) -> list[str]:
    """A comma- or line-separated field as its non-blank items."""
    raw = text(form, name) or ""
    return [item.strip() for item in raw.replace("\n", ",").split(",") if item.strip()]


def numbers(form: FormData, name: str) -> list[float] | None:
    items = listed(form, name)
    try:
        return [float(item) for item in items] if items else None
    except ValueError as exc:
        raise RejectedInput(f"{name}: numbers separated by commas, like 0, 5, 300") from exc


def checked(form: FormData, name: str) -> list[str]:
    """The values of the ticked checkboxes called ``name``."""
    return [value for value in form.getlist(name) if isinstance(value, str)]


__all__ = ["checked", "listed", "numbers", "text"]
