"""Walking an environment's settings by a field path, as the config limits
(infra/config/limits.py) and the prerequisites (infra/prerequisites.py) name fields: dotted,
`[]` every item of a list, `{}` every key of a mapping, `{=}` every value. With the rules that
span fields, one layer above the models it walks (infra/checks/limits.py and the prerequisites
read it).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from infra.config.settings import Settings


def values(settings: Settings, path: str) -> list[tuple[str, Any]]:
    """(concrete config path, value) of every value at `path` in settings."""
    found = [("", settings)]
    for step in path.split("."):
        name = step.split("[")[0].split("{")[0]
        out = []
        for where, obj in found:
            value = obj.get(name) if isinstance(obj, dict) else getattr(obj, name, None)
            here = f"{where}.{name}" if where else name
            if value is None:
                continue
            if step.endswith("[]"):
                out += [(f"{here}[{i}]", item) for i, item in enumerate(value)]
            elif step.endswith("{}"):
                out += [(here, key) for key in value]
            elif step.endswith("{=}"):
                out += [(f"{here}.{key}", item) for key, item in value.items()]
            else:
                out.append((here, value))
        found = out
    return found
