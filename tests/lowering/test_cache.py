"""The lowering cache survives damaged entries; `pallaslab cache` shows and clears it; temporary
files (profiles, the TPU compiler worker's logs and dumps, libtpu's own logs) live under one
session directory that is removed at exit."""

from __future__ import annotations

import errno
import json
import os
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from pallaslab import lowering
from pallaslab.cli import main
from pallaslab.lowering import cache
from pallaslab.lowering.result import Diagnostic, KernelLowering, Resources, Stage
from pallaslab.util.tempdir import session_tmpdir

K = "tests/kernels.py"
GOOD = KernelLowering("k", 0, "mosaic-tpu", True, (Stage("jaxpr", "{ lambda ; }", ((1, "a:1"),)),),
                      (Diagnostic("info", "note", "fine", None, (("needed_bytes", 4),)),),
                      Resources(vmem_bytes=1024))


@pytest.fixture
def cache_dir(tmp_path, monkeypatch):
    monkeypatch.setenv("PALLASLAB_CACHE_DIR", str(tmp_path))
    return tmp_path / "lowering"


def _good_json() -> dict:
    return GOOD.to_json()


def _without(key: str) -> dict:
    data = _good_json()
    del data[key]
    return data


def _with(**changes) -> dict:
    return {**_good_json(), **changes}


DAMAGED = {
    "empty": "",
    "truncated": json.dumps(_good_json())[:40],
    "not-json": "\x00\x01garbage",
    "json-list": "[1, 2, 3]",
    "json-string": '"hello"',
    "missing-name": json.dumps(_without("name")),
    "missing-stages": json.dumps(_without("stages")),
    "name-not-a-string": json.dumps(_with(name=5)),
    "index-not-an-int": json.dumps(_with(index="0")),
    "unknown-backend": json.dumps(_with(backend="cuda")),
    "ok-not-a-bool": json.dumps(_with(ok="yes")),
    "stages-not-a-list": json.dumps(_with(stages=7)),
    "stage-text-not-a-string": json.dumps(_with(stages=[{"name": "jaxpr", "text": 1,
                                                          "source_lines": []}])),
    "diagnostic-missing-keys": json.dumps(_with(diagnostics=[{"severity": "error"}])),
    "resources-extra-key": json.dumps(_with(resources={"vmem_bytes": 1, "flops": 2})),
    "resources-wrong-type": json.dumps(_with(resources={"vmem_bytes": "1 KiB"})),
}


def test_a_good_entry_round_trips(cache_dir):
    cache.store("a" * 40, GOOD)
    assert cache.load("a" * 40) == GOOD
    assert cache.load("b" * 40) is None  # absent


@pytest.mark.parametrize("damage", list(DAMAGED))
def test_a_damaged_entry_is_a_miss_and_is_rewritten(cache_dir, damage):
    key = "c" * 40
    cache_dir.mkdir(parents=True)
    (cache_dir / f"{key}.json").write_text(DAMAGED[damage])
    assert cache.load(key) is None
    cache.store(key, GOOD)
    assert cache.load(key) == GOOD


def test_lowering_through_a_damaged_cache(cache_dir):
    from kernels import CATALOG

    fn, args = CATALOG["vector_add"].case()
    first = lowering.lower(fn, *args, target="tpu-v5e")
    assert not first[0].cached
    (entry,) = cache_dir.glob("*.json")
    entry.write_text('{"name": "vector_add_kernel", "stages": ')  # a write cut short
    again = lowering.lower(fn, *args, target="tpu-v5e")
    assert not again[0].cached and again[0].ok  # a miss, lowered afresh ...
    assert json.loads(entry.read_text())["name"] == first[0].name  # ... and rewritten
    assert lowering.lower(fn, *args, target="tpu-v5e")[0].cached


def test_cache_location(monkeypatch, tmp_path):
    monkeypatch.setenv("PALLASLAB_CACHE_DIR", str(tmp_path / "mine"))
    assert cache.cache_dir() == tmp_path / "mine" / "lowering"
    monkeypatch.delenv("PALLASLAB_CACHE_DIR")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert cache.cache_dir() == tmp_path / "xdg" / "pallaslab" / "lowering"
    monkeypatch.delenv("XDG_CACHE_HOME")
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    assert cache.cache_dir() == tmp_path / "home" / ".cache" / "pallaslab" / "lowering"


# --- pallaslab cache ---------------------------------------------------------------------


def test_cache_info_and_clear(cache_dir, capsys):
    assert main(["cache"]) == 0
    out = capsys.readouterr().out
    assert f"lowering cache: {cache_dir}" in out and "0 entries, 0 bytes" in out
    for key in ("d" * 40, "e" * 40):
        cache.store(key, GOOD)
    (cache_dir / "notes.txt").write_text("not ours")  # never counted, never removed
    size = sum(p.stat().st_size for p in cache_dir.glob("*.json"))
    assert main(["cache", "info", "--json"]) == 0
    assert json.loads(capsys.readouterr().out) == {
        "action": "info", "directory": str(cache_dir), "entries": 2, "bytes": size,
        "jax_cache": {"directory": str(cache.jax_cache_dir()), "entries": 0, "bytes": 0}}
    assert main(["cache", "info"]) == 0
    assert f"2 entries, {size:,} bytes" in capsys.readouterr().out
    assert main(["cache", "clear"]) == 0
    assert f"removed 2 entries from {cache_dir}, freed {size:,} bytes" in capsys.readouterr().out
    assert not list(cache_dir.glob("*.json")) and (cache_dir / "notes.txt").exists()
    assert main(["cache", "clear", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["entries"] == 0


def test_cache_info_before_the_cache_exists(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("PALLASLAB_CACHE_DIR", str(tmp_path / "never-created"))
    assert main(["cache", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["entries"] == 0
    assert main(["cache", "clear"]) == 0
    assert "removed 0 entries" in capsys.readouterr().out


# --- temporary files ---------------------------------------------------------------------


def test_profiles_live_in_the_session_directory():
    from kernels import CATALOG

    from pallaslab.execute.profile import profile

    fn, args = CATALOG["vector_add"].case()
    timeline = profile(fn, *args)
    assert timeline.trace_file is not None
    assert Path(timeline.trace_file).is_relative_to(session_tmpdir() / "profiles")


@pytest.mark.tpu_compiler
def test_tpu_worker_and_libtpu_logs_live_in_the_session_directory(private_lowering_cache):
    pytest.importorskip("libtpu")
    from kernels import CATALOG

    from pallaslab.lowering import tpu_compile

    fn, args = CATALOG["vector_add"].case()
    assert lowering.lower(fn, *args, target="tpu-v5e", compile=True, use_cache=False).ok
    directory = tpu_compile.worker()._dir
    assert directory.is_relative_to(session_tmpdir())
    assert (directory / "worker.log").exists()  # what libtpu printed
    assert list((directory / "libtpu-logs").glob("tpu_driver*")), "libtpu logged elsewhere"


@pytest.mark.tpu_compiler
def test_nothing_is_left_in_tmpdir_after_a_compile(tmp_path):
    pytest.importorskip("libtpu")
    private = tmp_path / "tmp"
    private.mkdir()
    env = {**os.environ, "TMPDIR": str(private), "JAX_PLATFORMS": "cpu",
           "PALLASLAB_CACHE_DIR": str(tmp_path / "cache")}
    proc = subprocess.run([sys.executable, "-m", "pallaslab", "lower", f"{K}:matmul_f32",
                           "--target", "tpu-v5e", "--compile", "--no-cache", "--json"],
                          capture_output=True, text=True, env=env, timeout=300)
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["kernels"][0]["compiled"]
    left = [p.name for p in private.iterdir()
            if p.name.startswith(("libtpu", "tpu", "pallaslab"))]
    assert left == []


def test_clear_that_cannot_remove_says_so(cache_dir, monkeypatch, capsys):
    cache.store("f" * 40, GOOD)

    def refuse(path, *, dir_fd=None):
        raise PermissionError(13, "Permission denied")

    monkeypatch.setattr(os, "unlink", refuse)
    assert main(["cache", "clear", "--json"]) == 2
    error = json.loads(capsys.readouterr().out)["error"]
    assert error["type"] == "CacheError"
    assert error["message"] == (f"cannot remove the cache entry '{cache_dir / ('f' * 40)}.json':"
                                " Permission denied")


# --- a cache of the user's own, never entered through a link ------------------------------


def _mode(path: Path) -> int:
    return stat.S_IMODE(path.lstat().st_mode)


def _outside(tmp_path: Path) -> Path:
    """A directory outside the cache holding a file named like an entry."""
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / f"{'9' * 40}.json").write_text("not the cache's")
    return outside


def test_the_cache_directory_is_private(tmp_path, monkeypatch):
    root = tmp_path / "new" / "cache"
    monkeypatch.setenv("PALLASLAB_CACHE_DIR", str(root))
    cache.store("a" * 40, GOOD)
    assert (_mode(root), _mode(root / "lowering")) == (0o700, 0o700)
    assert _mode(root / "lowering" / f"{'a' * 40}.json") == 0o600


def test_a_cache_directory_open_to_others_is_made_private(cache_dir):
    cache_dir.mkdir(mode=0o777)
    cache_dir.chmod(0o755)  # made by an older pallaslab
    cache.store("a" * 40, GOOD)
    assert _mode(cache_dir) == 0o700


def test_clear_refuses_a_link_in_the_cache_directorys_place(cache_dir, tmp_path, capsys):
    outside = _outside(tmp_path)
    cache_dir.symlink_to(outside, target_is_directory=True)
    for action in ("info", "clear"):
        assert main(["cache", action, "--json"]) == 2
        error = json.loads(capsys.readouterr().out)["error"]
        assert error == {"type": "CacheError", "message": (
            f"the cache directory '{cache_dir}' is a symbolic link; pallaslab never follows one "
            "(it could lead outside the cache): remove the link")}
    assert [p.name for p in outside.iterdir()] == [f"{'9' * 40}.json"]


def test_a_link_in_the_cache_directorys_place_is_neither_read_nor_written(cache_dir, tmp_path):
    outside = _outside(tmp_path)
    (outside / f"{'a' * 40}.json").write_text(json.dumps(_good_json()))
    cache_dir.symlink_to(outside, target_is_directory=True)
    assert cache.load("a" * 40) is None
    cache.store("b" * 40, GOOD)
    assert sorted(p.name for p in outside.iterdir()) == [f"{'9' * 40}.json", f"{'a' * 40}.json"]


def test_clear_removes_only_the_regular_files_pallaslab_wrote(cache_dir, tmp_path, capsys):
    outside = _outside(tmp_path)
    cache.store("a" * 40, GOOD)
    (cache_dir / "tmpk3x_9q2a.tmp").write_text('{"name": ')  # a store cut short by a crash
    kept = {
        f"{'b' * 40}.json": lambda p: p.symlink_to(outside / f"{'9' * 40}.json"),
        f"{'c' * 40}.json": lambda p: p.symlink_to(outside, target_is_directory=True),
        f"{'d' * 40}.json": lambda p: (p.mkdir(), (p / "inside.json").write_text("{}")),
        "notes.json": lambda p: p.write_text("{}"),
        "tmp-mine.txt": lambda p: p.write_text("not ours"),
    }
    for name, make in kept.items():
        make(cache_dir / name)
    assert main(["cache", "clear", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["entries"] == 1
    assert sorted(p.name for p in cache_dir.iterdir()) == sorted(kept)
    assert (cache_dir / f"{'d' * 40}.json" / "inside.json").exists()
    assert [p.name for p in outside.iterdir()] == [f"{'9' * 40}.json"]


def test_a_store_that_fills_the_disk_leaves_no_temporary_file(cache_dir, monkeypatch):
    def disk_full(obj, f):
        f.write('{"name": ')
        raise OSError(errno.ENOSPC, "No space left on device")

    with monkeypatch.context() as full:
        full.setattr(json, "dump", disk_full)
        cache.store("a" * 40, GOOD)  # only costs speed ...
    assert list(cache_dir.iterdir()) == []  # ... and leaves nothing behind
    cache.store("a" * 40, GOOD)
    assert [p.name for p in cache_dir.iterdir()] == [f"{'a' * 40}.json"]


def _bad_settings(tmp_path: Path) -> dict[str, tuple[str, str]]:
    """Each bad $PALLASLAB_CACHE_DIR: (value, the message that names it)."""
    a_file = tmp_path / "a-file"
    a_file.write_text("")
    read_only = tmp_path / "read-only"
    read_only.mkdir(mode=0o500)
    v = "PALLASLAB_CACHE_DIR"
    return {
        "relative": ("rel/cache", f"{v}='rel/cache' is not an absolute path "
                                  f"(e.g. {v}={Path.cwd() / 'rel' / 'cache'})"),
        "a file": (str(a_file), f"{v}={str(a_file)!r} is not a directory"),
        "under a file": (str(a_file / "sub"), f"{v}={str(a_file / 'sub')!r} cannot be created: "
                                              f"{str(a_file)!r} is not a directory"),
        "read-only": (str(read_only), f"{v}={str(read_only)!r} is not a directory you can "
                                      "write to"),
        "under read-only": (str(read_only / "sub"),
                            f"{v}={str(read_only / 'sub')!r} cannot be created: "
                            f"{str(read_only)!r} is not a directory you can write to"),
    }


@pytest.fixture
def read_only_for_root(tmp_path, monkeypatch):
    """As root, mode bits do not stop writes: report the read-only directory as unwritable."""
    if os.geteuid() != 0:
        return
    real_access = os.access

    def access(path, mode, **kwargs):
        if Path(path) == tmp_path / "read-only" and mode & os.W_OK:
            return False
        return real_access(path, mode, **kwargs)

    monkeypatch.setattr(os, "access", access)


@pytest.mark.parametrize("bad", ["relative", "a file", "under a file", "read-only",
                                 "under read-only"])
def test_a_bad_cache_dir_setting_is_named(bad, tmp_path, monkeypatch, capsys,
                                          read_only_for_root):
    value, message = _bad_settings(tmp_path)[bad]
    monkeypatch.setenv("PALLASLAB_CACHE_DIR", value)
    for action in ("info", "clear"):
        assert main(["cache", action, "--json"]) == 2
        error = json.loads(capsys.readouterr().out)["error"]
        assert error == {"type": "CacheDirError", "message": message}
    with pytest.raises(cache.CacheDirError) as raised:
        cache.store("a" * 40, GOOD)
    assert str(raised.value) == message


def test_lowering_with_a_bad_cache_dir_setting_says_so(monkeypatch):
    from kernels import CATALOG

    monkeypatch.setenv("PALLASLAB_CACHE_DIR", "relative/cache")
    fn, args = CATALOG["vector_add"].case()
    with pytest.raises(cache.CacheDirError) as raised:
        lowering.lower(fn, *args, target="tpu-v5e")
    assert str(raised.value).startswith(
        "PALLASLAB_CACHE_DIR='relative/cache' is not an absolute path")
    assert lowering.lower(fn, *args, target="tpu-v5e", use_cache=False)[0].ok
