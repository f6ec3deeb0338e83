"""A directory of the user's own that is never entered through a symbolic link.

For caches in the user's home: created readable by the user alone (0o700) and opened with
O_NOFOLLOW, so a symlink planted in its place is refused rather than followed. Every file is
then named relative to that open directory (`dir_fd`), so nothing outside it is read, written or
removed, even if its path is swapped for a link meanwhile.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import re
import secrets
from collections.abc import Callable
from typing import TextIO

PRIVATE_MODE = 0o700
FILE_MODE = 0o600
_OPEN_DIR = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC


@dataclasses.dataclass(frozen=True)
class FileEntry:
    name: str
    size: int


def open_dir(path: str | os.PathLike[str], create: bool = False) -> int:
    """A file descriptor of the directory `path` (the caller closes it). Raises OSError:
    ELOOP when `path` is a symbolic link, ENOTDIR when it is not a directory, FileNotFoundError
    when absent and not `create`. With `create`, a new directory is private and an existing
    one of ours open to others is made private (its parent must exist)."""
    if create:
        with contextlib.suppress(FileExistsError):
            os.mkdir(path, PRIVATE_MODE)
    fd = os.open(path, _OPEN_DIR)
    if create:
        try:
            _make_private(fd)
        except BaseException:
            os.close(fd)
            raise
    return fd


def _make_private(fd: int) -> None:
    status = os.fstat(fd)
    if status.st_mode & 0o077 and status.st_uid == os.geteuid():
        os.fchmod(fd, PRIVATE_MODE)


def read_text(dir_fd: int, name: str) -> str:
    """The text of the regular file `name` in the directory; a symlink there raises ELOOP."""
    fd = os.open(name, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=dir_fd)
    with os.fdopen(fd, encoding="utf-8") as f:
        return f.read()


def write_atomically(dir_fd: int, name: str, write: Callable[[TextIO], object]) -> None:
    """Create `name` in the directory with what `write` writes to a private temporary file
    `tmp*.tmp` beside it, then rename it into place, so a reader never sees half a file. If the
    write fails (a full disk), the temporary file is removed and the error raised."""
    partial = f"tmp{secrets.token_hex(8)}.tmp"
    fd = os.open(partial, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC,
                 FILE_MODE, dir_fd=dir_fd)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            write(f)
        os.replace(partial, name, src_dir_fd=dir_fd, dst_dir_fd=dir_fd)
    except BaseException:
        with contextlib.suppress(OSError):  # the error that got us here is the one to report
            os.unlink(partial, dir_fd=dir_fd)
        raise


def regular_files(dir_fd: int, names: re.Pattern[str]) -> list[FileEntry]:
    """The regular files in the directory whose whole name matches `names`; symbolic links,
    directories and other entries are left out (never followed)."""
    found = []
    with os.scandir(dir_fd) as entries:
        for entry in entries:
            if not names.fullmatch(entry.name):
                continue
            try:
                if entry.is_file(follow_symlinks=False):
                    found.append(FileEntry(entry.name,
                                           entry.stat(follow_symlinks=False).st_size))
            except FileNotFoundError:
                continue  # removed meanwhile by another process
    return found
