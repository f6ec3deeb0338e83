"""How a source location reads to the user: "file.py:LINE" without the directories, and a
notebook cell's line as IPython's tracebacks name it, "Cell In[3]:1".

Sources are kept whole ("/path/file.py:LINE", or the cell's code name IPython compiled it
under: "/tmp/ipykernel_1/2041743380.py", "<ipython-input-3-...>") so that the lines the
interpreters log match the captured ones; only their display goes through `short_source`.
IPython is never imported here: the running shell, if any, is looked up in `sys.modules`.
"""

from __future__ import annotations

import sys
from typing import overload


@overload
def short_source(source: str) -> str: ...
@overload
def short_source(source: None) -> None: ...
def short_source(source: str | None) -> str | None:
    """"file.py:LINE" without the directories, or "Cell In[N]:LINE" for a notebook cell's
    line; None stays None, and text with no line number is named as a file."""
    if source is None:
        return None
    file, colon, line = source.rpartition(":")
    if not colon or not line.isdigit():
        return file_label(source)
    return f"{file_label(file)}:{line}"


def file_label(filename: str) -> str:
    """A file's name without its directories, or "Cell In[N]" for a notebook cell's code."""
    return cell_label(filename) or filename.rsplit("/", 1)[-1]


def cell_label(filename: str) -> str | None:
    """"Cell In[N]" when the running IPython shell compiled cell N under `filename`; None when
    there is no shell (a script, the CLI, a worker process) or it did not."""
    ipython = sys.modules.get("IPython")
    get_shell = getattr(ipython, "get_ipython", None)
    shell = get_shell() if callable(get_shell) else None
    compiler = getattr(shell, "compile", None)
    format_code_name = getattr(compiler, "format_code_name", None)
    if not callable(format_code_name):
        return None
    try:
        label = format_code_name(filename)
    except Exception:  # a shell of another make: its file names stay as they are
        return None
    return f"{label[0]} {label[1]}" if label else None
