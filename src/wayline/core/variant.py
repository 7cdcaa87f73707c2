"""Paths into Spark VARIANT values, as subscription filters (``wayline.pipelines.filter_column``)
and filter rules (``wayline.rules.rule``) both write them."""

from __future__ import annotations


def json_path(steps: tuple[str | int, ...]) -> str:
    """A Spark variant path (``$['a']["it's"][0]``)."""
    # Spark's variant paths have no escapes: a key is quoted with the quote it does not
    # contain (parsing rejected keys with both), so no key can end its quotes early.
    return "$" + "".join(
        f"[{step}]" if isinstance(step, int) else (f"['{step}']" if "'" not in step else f'["{step}"]')
        for step in steps
    )


__all__ = ["json_path"]
