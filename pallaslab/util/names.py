"""How a kernel's ref reads to the user, in every view: the body's parameter as the user wrote
it first, then where it comes from, "x_ref (args[0])", "local_sem (scratch[0])".

A body that takes `*args` names its refs "args[0]", as its code does: the captured "*args[0]"
loses its star, and the origin is left out when it reads the same ("args[1]"), so the table
never shows "*args[0] (args[1])".
"""

from __future__ import annotations


def ref_name(param: str | None, origin: str, detail: str | None = None) -> str:
    """"param (origin)" ("param (origin, detail)"), the origin alone when the body gives no
    name; `detail`: what else the views say of it (the caller's expression, a window)."""
    where = f"{origin}, {detail}" if detail else origin
    if not param:
        return f"{origin} ({detail})" if detail else origin
    name = body_name(param)
    if param.startswith("*") and _base(name) == _base(origin):
        return f"{name} ({detail})" if detail else name
    return f"{name} ({where})"


def _base(name: str) -> str:
    return name.partition("[")[0]


def body_name(param: str) -> str:
    """The ref as the body's code names it: "args[0]" for the captured "*args[0]"."""
    return param.lstrip("*")
