"""The lowering cache survives damaged entries; `pallaslab cache` shows and clears it; temporary
files (profiles, the TPU compiler worker's logs and dumps, libtpu's own logs) live under one
session directory that is removed at exit."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

import lowering
from lowering import cache
from lowering.result import Diagnostic, KernelLowering, Resources, Stage
from pallaslab.cli import main
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
        "action": "info", "directory": str(cache_dir), "entries": 2, "bytes": size}
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

    from lowering import tpu_compile

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

    def refuse(self, missing_ok=False):
        raise PermissionError(13, "Permission denied")

    monkeypatch.setattr(Path, "unlink", refuse)
    assert main(["cache", "clear", "--json"]) == 2
    error = json.loads(capsys.readouterr().out)["error"]
    assert error["type"] == "CacheError"
    assert error["message"] == (f"cannot remove the cache entry '{cache_dir / ('f' * 40)}.json':"
                                " Permission denied")
