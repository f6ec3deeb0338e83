"""`pallaslab cache [info|clear] [--json]`: where the lowering cache is, its size; empty it.

The cache holds lowering and compile results (lowering/cache.py), in $PALLASLAB_CACHE_DIR,
else $XDG_CACHE_HOME/pallaslab, else ~/.cache/pallaslab, and beside them JAX's persistent
compilation cache of pallaslab's worker and CLI (`jax-<versions>/`). `clear` removes only the
regular files pallaslab (or JAX, in its folder) wrote there and refuses a cache directory that
is a symbolic link (exit status 2).
"""

from __future__ import annotations

import argparse

from pallaslab.cli._shared import EXIT_OK, console, print_json, safe


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("cache", help="show where the lowering cache is and its size; clear it",
                       description="Show where the lowering cache is, how many entries it "
                                   "holds and their size, and those of JAX's compilation "
                                   "cache beside it (info, the default), or remove every "
                                   "entry of both (clear): only the files pallaslab (or JAX) "
                                   "wrote, never through a symbolic link. Location: "
                                   "$PALLASLAB_CACHE_DIR (an absolute path), else "
                                   "$XDG_CACHE_HOME/pallaslab, else ~/.cache/pallaslab; the "
                                   "directory is private to you.")
    p.add_argument("action", nargs="?", default="info", choices=("info", "clear"),
                   help="info (default) or clear")
    p.add_argument("--json", action="store_true",
                   help='print one JSON object: {"directory", "entries", "bytes", "jax_cache": '
                        '{"directory", "entries", "bytes"}} (for clear: what was removed)')
    p.set_defaults(func=run)


def enable_jax_cache(own_process: bool) -> None:
    """JAX's persistent compilation cache for the `pallaslab` command's own process (not when
    `main([...])` is called inside another program, whose JAX options are its own)."""
    if own_process:
        from pallaslab.util import jax_cache

        jax_cache.enable()


def run(args: argparse.Namespace) -> int:
    from pallaslab.lowering import cache

    if args.action == "clear":
        removed, jax_removed = cache.clear(), cache.jax_clear()
        if args.json:
            print_json({"action": "clear", **removed.to_json(),
                        "jax_cache": jax_removed.to_json()})
        else:
            console().print(f"removed {_entries(removed.entries)} from "
                            f"{safe(removed.directory)}, freed {_size(removed.bytes)}\n"
                            f"removed {_entries(jax_removed.entries)} from JAX's compilation "
                            f"cache, freed {_size(jax_removed.bytes)}")
        return EXIT_OK
    now, jax_now = cache.info(), cache.jax_info()
    if args.json:
        print_json({"action": "info", **now.to_json(), "jax_cache": jax_now.to_json()})
    else:
        console().print(f"lowering cache: {safe(now.directory)}\n"
                        f"{_entries(now.entries)}, {_size(now.bytes)}\n"
                        f"JAX compilation cache: {safe(jax_now.directory)}\n"
                        f"{_entries(jax_now.entries)}, {_size(jax_now.bytes)}")
    return EXIT_OK


def _size(n: int) -> str:
    if n < 1024:
        return f"{n:,} bytes"
    if n < 1 << 20:
        return f"{n / 1024:,.1f} KiB"
    return f"{n / (1 << 20):,.1f} MiB"


def _entries(n: int) -> str:
    return f"{n} entr{'y' if n == 1 else 'ies'}"
