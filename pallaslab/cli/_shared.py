"""Pieces the subcommands share: loading cases, capturing, printing errors."""

from __future__ import annotations

import json
import sys
from typing import Any

from rich.console import Console

from pallaslab.cases import Case, load_case
from pallaslab.errors import PallasLabError
from pallaslab.model import Capture, capture

TPU_TARGETS = ("tpu-v4", "tpu-v5e", "tpu-v5p", "tpu-v6e")
GPU_TARGETS = ("gpu-a100", "gpu-h100", "gpu-b200")


def console(stderr: bool = False) -> Console:
    # Pipes and CI logs get a wide page instead of rich's 80 columns.
    probe = Console(stderr=stderr)
    width = None if probe.is_terminal else 160
    return Console(stderr=stderr, highlight=False, width=width)


def load_and_capture(spec: str) -> tuple[Case, Capture]:
    case = load_case(spec)
    return case, capture(case.fn, *case.args, **case.kwargs)


def fail(err: PallasLabError, status: int = 2) -> int:
    console(stderr=True).print(f"[bold red]error:[/] {_escape(str(err))}")
    return status


def print_json(payload: Any) -> None:
    sys.stdout.write(json.dumps(payload, indent=2) + "\n")


def backend_for_target(target: str) -> str:
    """Which semantics a target's findings are judged by."""
    return "tpu" if target.startswith("tpu") else "triton"


def _escape(text: str) -> str:
    from rich.markup import escape

    return escape(text)
