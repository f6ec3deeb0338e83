"""Every `PALLASLAB_*` environment variable a user sets, read and checked in one place.

Each reader reads its variable at each call (so a notebook can change it between runs) and
checks it like the flag it stands for: a bad value raises `SettingError` naming the variable,
the rule and the value, in the words of the flag's own usage error (the CLI's validators in
`pallaslab.cli._shared` call the same rule functions, so the wording cannot drift).

| variable | default | rule |
| --- | --- | --- |
| PALLASLAB_TIMEOUT | 300 s (`execute.isolation.DEFAULT_TIMEOUT`) | a finite number of seconds > 0 |
| PALLASLAB_MAX_PROGRAMS | 2^24 | a whole number of programs >= 1 |
| PALLASLAB_MAX_DEVICES | `DEFAULT_MAX_DEVICES` | a whole number of devices >= 1 |
| PALLASLAB_MEMORY_BUDGET | 50% of the memory available | bytes >= 1, or a fraction in (0, 1] |
| PALLASLAB_PUBLISHED_TIMINGS | none (off) | the path of an existing published-timings CSV |

`PALLASLAB_CACHE_DIR` is checked where it is used (`lowering/cache.py`), and
`PALLASLAB_MOSAIC_GPU_COMPILER` names where the CUDA plugin is installed
(`lowering/mosaic_gpu_compile.py`). `PALLASLAB_WORKER_STATUS`, `PALLASLAB_WORKER_LOG`,
`PALLASLAB_MOSAIC_DUMP` and `PALLASLAB_MOSAIC_GPU_DUMP` are not settings: pallaslab sets
them for its own worker processes.
"""

from __future__ import annotations

import dataclasses
import math
import os
from collections.abc import Callable

from pallaslab.errors import SettingError

TIMEOUT = "PALLASLAB_TIMEOUT"
MAX_PROGRAMS = "PALLASLAB_MAX_PROGRAMS"
MAX_DEVICES = "PALLASLAB_MAX_DEVICES"
MEMORY_BUDGET = "PALLASLAB_MEMORY_BUDGET"
PUBLISHED_TIMINGS = "PALLASLAB_PUBLISHED_TIMINGS"

DEFAULT_MAX_PROGRAMS = 2**24
# Simulated CPU devices a run may ask for: the most that worked when measured on a 2-core
# host (jax 0.12, `jax_num_cpu_devices`, a jitted shard_map ppermute over every device):
# 64 devices took ~7 s, 256 ~19 s, 1024 ~60 s, and 4096 had not finished after 90 s. XLA
# starts threads per device: 10,000 abort in thread creation or run for minutes.
DEFAULT_MAX_DEVICES = 1024
DEFAULT_MEMORY_SHARE = 0.5  # of the memory available when the run is prepared


# --- rules: the text of a bad value, shared with the CLI's flags ----------------------------


def seconds(text: str) -> float:
    """A time limit: a finite number of seconds > 0. Raises ValueError with the rule."""
    value = _float(text)
    if not math.isfinite(value) or value <= 0:
        raise ValueError(f"must be a finite number of seconds > 0, got {text!r}")
    return value


def whole_number(text: str, what: str) -> int:
    """A count of `what` >= 1 (`_` and `,` may group digits). Raises ValueError with the rule."""
    digits = text.strip().replace("_", "").replace(",", "")
    if not digits.isdigit() or int(digits) < 1:
        raise ValueError(f"must be a whole number of {what} >= 1, got {text!r}")
    return int(digits)


def device_count(text: str) -> int:
    """`--devices N`: simulated CPU devices, from 1 to `max_devices()`."""
    devices = whole_number(text, "simulated CPU devices")
    problem = devices_over_limit(devices)
    if problem:
        raise ValueError(f"{problem}, got {text!r}")
    return devices


def devices_over_limit(devices: int) -> str | None:
    """Why `devices` simulated CPU devices are too many for this machine, or None."""
    limit = max_devices()
    if devices <= limit:
        return None
    return (f"must be at most {limit:,} simulated CPU devices (the limit on this machine, "
            f"{_source(MAX_DEVICES, limit, DEFAULT_MAX_DEVICES)}: JAX starts threads for every "
            f"device, and far more abort in XLA; raise it with {MAX_DEVICES}={devices})")


def memory_budget_value(text: str) -> float:
    """A budget: whole bytes >= 1, or a fraction of the available memory in (0, 1]."""
    rule = (f"must be a number of bytes >= 1 or a fraction of the memory available in (0, 1] "
            f"(e.g. 0.5 or 8000000000), got {text!r}")
    digits = text.strip().replace("_", "").replace(",", "")
    if digits.isdigit():
        if int(digits) < 1:
            raise ValueError(rule)
        return int(digits)
    value = _float(text)
    if not 0 < value <= 1:
        raise ValueError(rule)
    return value


def existing_file(text: str) -> str:
    """A path to a file that exists. Raises ValueError with the rule."""
    path = os.path.expanduser(text.strip())
    if not os.path.isfile(path):
        raise ValueError(f"must be the path of an existing file, got {text!r}")
    return path


# --- readers ---------------------------------------------------------------------------


def timeout() -> float | None:
    """$PALLASLAB_TIMEOUT in seconds, or None when unset."""
    return _read(TIMEOUT, seconds)


def max_programs(default: int = DEFAULT_MAX_PROGRAMS) -> int:
    """The most programs a whole-grid analysis takes on: $PALLASLAB_MAX_PROGRAMS, else
    `default`."""
    value = _read(MAX_PROGRAMS, lambda text: whole_number(text, "programs"))
    return default if value is None else value


def max_devices() -> int:
    """The most simulated CPU devices a run may ask for."""
    value = _read(MAX_DEVICES, lambda text: whole_number(text, "simulated CPU devices"))
    return DEFAULT_MAX_DEVICES if value is None else value


@dataclasses.dataclass(frozen=True)
class MemoryBudget:
    """What a run may hold, in bytes, and where that figure comes from (for messages)."""

    nbytes: int
    origin: str  # "50% of the 21.9 GiB available; PALLASLAB_MEMORY_BUDGET=0.5 by default"


def memory_budget() -> MemoryBudget:
    """$PALLASLAB_MEMORY_BUDGET in bytes, or its share of the memory available (default
    `DEFAULT_MEMORY_SHARE`). None of it is reserved: it is a bound on estimates."""
    value = _read(MEMORY_BUDGET, memory_budget_value)
    if isinstance(value, int):
        return MemoryBudget(value, f"{MEMORY_BUDGET}={value}")
    share = DEFAULT_MEMORY_SHARE if value is None else value
    available = available_memory()
    set_by = f"{MEMORY_BUDGET}={share:g}" if value is not None else \
        f"{MEMORY_BUDGET}={share:g} by default"
    if available is None:  # nothing to take a share of: no bound
        return MemoryBudget(2**63, f"the memory available is unknown; {set_by}")
    return MemoryBudget(int(share * available),
                        f"{share:.0%} of the {size_text(available)} available; {set_by}")


def available_memory() -> int | None:
    """Bytes the kernel says a new allocation can get without swapping: /proc/meminfo's
    MemAvailable, else the free physical pages; None when neither is known."""
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    try:
        return os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (ValueError, OSError, AttributeError):
        return None


def published_timings() -> str | None:
    """$PALLASLAB_PUBLISHED_TIMINGS: the published device timings (tokamax's autotuning table
    as CSV) the Pipeline view shows beside its prediction; None (off) when unset."""
    return _read(PUBLISHED_TIMINGS, existing_file)


def check_all() -> None:
    """Read every setting, so a bad one is reported before a command starts."""
    timeout()
    max_programs()
    max_devices()
    memory_budget()
    published_timings()


def size_text(nbytes: int) -> str:
    """Bytes for a message: "8.00 GiB", "12.0 MiB", "512 B"."""
    for unit, scale in (("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if nbytes >= scale:
            return f"{nbytes / scale:,.2f} {unit}"
    return f"{nbytes} B"


# --- helpers -----------------------------------------------------------------------------


def _read[T](name: str, parse: Callable[[str], T]) -> T | None:
    """The variable parsed, None when unset or empty; a bad value is a SettingError."""
    text = os.environ.get(name, "")
    if not text.strip():
        return None
    try:
        return parse(text)
    except ValueError as err:
        raise SettingError(f"{name}: {err}") from None


def _float(text: str) -> float:
    try:
        return float(text)
    except ValueError:
        return math.nan


def _source(name: str, value: int, default: int) -> str:
    return f"{name}={value}" if value != default or os.environ.get(name, "").strip() else \
        f"{name}={value} by default"
