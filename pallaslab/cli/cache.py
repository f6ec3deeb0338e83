"""`pallaslab cache [info|clear] [--json]`: where the lowering cache is, its size; empty it.

The cache holds lowering and compile results (lowering/cache.py), in $PALLASLAB_CACHE_DIR,
else $XDG_CACHE_HOME/pallaslab, else ~/.cache/pallaslab. `clear` removes only the regular files
pallaslab wrote there and refuses a cache directory that is a symbolic link (exit status 2).
"""

from __future__ import annotations

import argparse

from pallaslab.cli._shared import EXIT_OK, console, print_json, safe


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("cache", help="show where the lowering cache is and its size; clear it",
                       description="Show where the lowering cache is, how many entries it "
                                   "holds and their size (info, the default), or remove "
                                   "every entry (clear): only the files pallaslab wrote, never "
                                   "through a symbolic link. Location: $PALLASLAB_CACHE_DIR (an "
                                   "absolute path), else $XDG_CACHE_HOME/pallaslab, else "
                                   "~/.cache/pallaslab; the directory is private to you.")
    p.add_argument("action", nargs="?", default="info", choices=("info", "clear"),
                   help="info (default) or clear")
    p.add_argument("--json", action="store_true",
                   help='print one JSON object: {"directory", "entries", "bytes"} (for clear: '
                        "what was removed)")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from pallaslab.lowering import cache

    if args.action == "clear":
        removed = cache.clear()
        if args.json:
            print_json({"action": "clear", **removed.to_json()})
        else:
            console().print(f"removed {_entries(removed.entries)} from "
                            f"{safe(removed.directory)}, freed {_size(removed.bytes)}")
        return EXIT_OK
    now = cache.info()
    if args.json:
        print_json({"action": "info", **now.to_json()})
    else:
        console().print(f"lowering cache: {safe(now.directory)}\n"
                        f"{_entries(now.entries)}, {_size(now.bytes)}")
    return EXIT_OK


def _size(n: int) -> str:
    if n < 1024:
        return f"{n:,} bytes"
    if n < 1 << 20:
        return f"{n / 1024:,.1f} KiB"
    return f"{n / (1 << 20):,.1f} MiB"


def _entries(n: int) -> str:
    return f"{n} entr{'y' if n == 1 else 'ies'}"
