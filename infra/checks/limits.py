"""Each mapped field against its source's limits (the table: infra/config/limits.py), run
last, for the fields no rule before it has named."""

from __future__ import annotations

from infra.config.base import Problems
from infra.config.limits import FIELDS, Grammar, constraints, tags_limit, violation
from infra.config.settings import Settings
from infra.field_paths import values


def check_limits(s: Settings, p: Problems) -> None:
    """Each mapped field against its source's limits; a field another rule already named is
    left to that rule's more specific line."""
    for path, limit in [*FIELDS.items(), ("tags", tags_limit())]:
        found = [(path, limit.measure(s))] if limit.measure else values(s, path)
        for where, value in found:
            if p.named(where) or value in ((), {}, []):  # an empty list or map is left out of the template
                continue
            if isinstance(limit.source, Grammar):
                broken = limit.source.problem(value) if isinstance(value, str) else None
                caution = limit.source.caution(value) if limit.source.caution and isinstance(value, str) and not broken else None
                if caution:
                    p.warn(f"{where}: {value!r} {caution}")
            else:
                broken = violation(value, constraints(limit.source))
            if broken:
                # A list or map is shown by its size: its contents would fill the line.
                shown = len(value) if isinstance(value, (tuple, list, dict)) else value
                p.error(where, shown, f"{broken} ({limit.source}{', ' + limit.note if limit.note else ''})")
