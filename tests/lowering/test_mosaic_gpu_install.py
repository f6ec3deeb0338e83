"""Which XLA CUDA plugin the Mosaic GPU compiler (`mosaic_gpu_compile`) installs and looks for:
CUDA 12 wherever JAX published jax-cuda12-* for the jaxlib (up to 0.12.0.1), CUDA 13 from
jaxlib 0.12.1 on (no CUDA 12 wheels exist there), with the package names, directories, tool
layout and install command of that CUDA major. Runs without the plugin installed."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from pallaslab.lowering import mosaic_gpu_compile as mgc


@pytest.fixture(autouse=True)
def _no_override(monkeypatch):
    monkeypatch.delenv(mgc.CUDA_ENV_VAR, raising=False)


@pytest.mark.parametrize(("jaxlib", "major"), [
    ("0.12.1", 13), ("0.12.2", 13), ("0.13.0", 13), ("0.12.1.dev20260101", 13), ("1.0", 13),
    ("0.12.0.1", 12), ("0.12.0", 12), ("0.11.2", 12), ("0.9.0", 12),
])
def test_the_cuda_major_follows_the_wheels_jax_published(jaxlib, major):
    assert mgc.cuda_major(jaxlib) == major


def test_the_installed_jaxlib_decides_by_default(monkeypatch):
    monkeypatch.setattr(mgc, "_jaxlib_version", lambda: "0.12.1")
    assert mgc.cuda_major() == 13
    monkeypatch.setattr(mgc, "_jaxlib_version", lambda: "0.12.0.1")
    assert mgc.cuda_major() == 12


def test_the_environment_overrides_the_cuda_major(monkeypatch):
    monkeypatch.setenv(mgc.CUDA_ENV_VAR, "12")
    assert mgc.cuda_major("0.12.1") == 12
    monkeypatch.setenv(mgc.CUDA_ENV_VAR, "13")
    assert mgc.cuda_major("0.11.2") == 13
    monkeypatch.setenv(mgc.CUDA_ENV_VAR, "11")
    with pytest.raises(ValueError, match=mgc.CUDA_ENV_VAR):
        mgc.cuda_major("0.12.1")


def test_package_names_and_directories_per_cuda_major(tmp_path):
    assert mgc.plugin_packages(13, "0.12.1") == ("jax-cuda13-pjrt==0.12.1",
                                                 "jax-cuda13-plugin==0.12.1")
    assert mgc.plugin_packages(12, "0.12.0.1") == ("jax-cuda12-pjrt==0.12.0.1",
                                                   "jax-cuda12-plugin==0.12.0.1")
    assert mgc.plugin_dirs(tmp_path, 13) == (tmp_path / "jax_plugins" / "xla_cuda13",
                                             tmp_path / "jax_cuda13_plugin")
    assert mgc.toolkit_dir(tmp_path, 13) == tmp_path / "nvidia" / "cu13"
    assert mgc.toolkit_dir(tmp_path, 12) == tmp_path / "nvidia" / "cuda_nvcc"


@pytest.mark.parametrize(("jaxlib", "names", "absent"), [
    ("0.12.1", ("jax_plugins/xla_cuda13", "jax_cuda13_plugin", "nvidia/cu13/bin/ptxas",
                "jax-cuda13-pjrt and jax-cuda13-plugin 0.12.1"), "cuda12"),
    ("0.12.0.1", ("jax_plugins/xla_cuda12", "jax_cuda12_plugin", "nvidia/cuda_nvcc/bin/ptxas",
                  "jax-cuda12-pjrt and jax-cuda12-plugin 0.12.0.1"), "cuda13"),
])
def test_missing_compiler_names_what_is_missing_and_the_fix(tmp_path, monkeypatch, jaxlib,
                                                             names, absent):
    monkeypatch.setenv(mgc.ENV_VAR, str(tmp_path))
    monkeypatch.setattr(mgc, "_jaxlib_version", lambda: jaxlib)
    why = mgc.missing_compiler()
    assert why is not None and "\n" not in why
    for name in names:
        assert name in why, (name, why)
    assert absent not in why
    assert mgc.MAKE_TARGET in why
    assert f"python -m pallaslab.lowering.mosaic_gpu_compile --install {tmp_path}" in why


def _fake_install(directory: Path, major: int, version: str) -> None:
    for d in mgc.plugin_dirs(directory, major):
        d.mkdir(parents=True)
    for dist in ("pjrt", "plugin"):
        (directory / f"jax_cuda{major}_{dist}-{version}.dist-info").mkdir()
    tools = mgc.toolkit_dir(directory, major)
    (tools / "bin").mkdir(parents=True)
    (tools / "bin" / "ptxas").touch()
    (tools / "nvvm" / "libdevice").mkdir(parents=True)
    (tools / "nvvm" / "libdevice" / "libdevice.10.bc").touch()


def test_a_complete_directory_of_the_right_cuda_major_is_not_missing(tmp_path, monkeypatch):
    monkeypatch.setenv(mgc.ENV_VAR, str(tmp_path))
    monkeypatch.setattr(mgc, "_jaxlib_version", lambda: "0.12.1")
    _fake_install(tmp_path, 13, "0.12.1")
    assert mgc.missing_compiler() is None
    # the same directory for a jaxlib with CUDA 12 wheels is not the compiler it needs
    monkeypatch.setattr(mgc, "_jaxlib_version", lambda: "0.12.0.1")
    assert "xla_cuda12" in (mgc.missing_compiler() or "")


def test_a_plugin_of_another_jaxlib_version_is_missing(tmp_path, monkeypatch):
    monkeypatch.setenv(mgc.ENV_VAR, str(tmp_path))
    monkeypatch.setattr(mgc, "_jaxlib_version", lambda: "0.12.2")
    _fake_install(tmp_path, 13, "0.12.1")
    why = mgc.missing_compiler()
    assert why is not None and "jax-cuda13-pjrt==0.12.2 (it has 0.12.1)" in why


def test_the_pip_command_installs_that_plugin_compile_only(tmp_path):
    cmd = mgc.pip_command(tmp_path, version="0.12.1", constraints="pins.txt")
    assert cmd[1:4] == ["-m", "pip", "install"]
    assert "--no-deps" in cmd and cmd[cmd.index("--target") + 1] == str(tmp_path)
    assert cmd[cmd.index("--constraint") + 1] == "pins.txt"
    assert "jax-cuda13-pjrt==0.12.1" in cmd and "jax-cuda13-plugin==0.12.1" in cmd
    assert not any("cuda12" in part for part in cmd)
    cmd12 = mgc.pip_command(tmp_path, version="0.12.0.1")
    assert "jax-cuda12-pjrt==0.12.0.1" in cmd12 and "--constraint" not in cmd12


def _release(ptxas: Path) -> tuple[int, int] | None:
    return mgc._ptxas_release(ptxas)


@pytest.mark.parametrize("major", [12, 13])
def test_install_tools_links_a_ptxas_of_that_cuda_major(tmp_path, major):
    pytest.importorskip("triton")
    if mgc.triton_ptxas(major) is None:
        with pytest.raises(RuntimeError, match=f"CUDA {major}"):
            mgc.install_tools(tmp_path, major)
        return
    mgc.install_tools(tmp_path, major)
    tools = mgc.toolkit_dir(tmp_path, major)
    release = _release(tools / "bin" / "ptxas")
    assert release is not None and release[0] == major
    assert (tools / "nvvm" / "libdevice" / "libdevice.10.bc").exists()
    assert (tools / "bin" / "nvdisasm").exists()
    mgc.install_tools(tmp_path, major)  # idempotent
    assert _release(tools / "bin" / "ptxas") == release


def test_install_drops_a_plugin_of_the_other_cuda_major(tmp_path, monkeypatch, capsys):
    pytest.importorskip("triton")
    for d in mgc.plugin_dirs(tmp_path, 12):
        d.mkdir(parents=True)
    (tmp_path / "jax_cuda12_pjrt-0.12.0.1.dist-info").mkdir()
    ran = []
    real_run = subprocess.run

    def run(cmd, *args, **kwargs):
        if cmd[1:3] == ["-m", "pip"]:
            ran.append(cmd)
            return subprocess.CompletedProcess(cmd, 0)
        return real_run(cmd, *args, **kwargs)

    monkeypatch.setattr(mgc.subprocess, "run", run)
    monkeypatch.setattr(mgc, "_jaxlib_version", lambda: "0.12.1")
    if mgc.triton_ptxas(13) is None:
        pytest.skip("the triton wheel has no CUDA 13 ptxas (install adds nvidia-cuda-nvcc)")
    mgc.install(tmp_path, constraints="pins.txt")
    (cmd,) = ran
    assert "jax-cuda13-pjrt==0.12.1" in cmd and "pins.txt" in cmd
    assert "jax-cuda13-pjrt==0.12.1" in capsys.readouterr().out  # the command is printed
    assert not (tmp_path / "jax_plugins" / "xla_cuda12").exists()
    assert not (tmp_path / "jax_cuda12_plugin").exists()
    assert not (tmp_path / "jax_cuda12_pjrt-0.12.0.1.dist-info").exists()
    assert (mgc.toolkit_dir(tmp_path, 13) / "bin" / "ptxas").exists()


def test_without_a_triton_ptxas_of_that_major_pip_adds_nvidia_cuda_nvcc(tmp_path, monkeypatch):
    monkeypatch.setattr(mgc, "triton_ptxas", lambda major: None)
    cmd = mgc.pip_command(tmp_path, version="0.12.1", quiet=True)
    assert "nvidia-cuda-nvcc>=13,<14" in cmd and "--quiet" in cmd
    with pytest.raises(RuntimeError, match="nvidia-cuda-nvcc 13"):
        mgc.install_tools(tmp_path, 13)


def test_check_says_what_is_missing(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv(mgc.ENV_VAR, str(tmp_path))
    monkeypatch.setattr(mgc, "_jaxlib_version", lambda: "0.12.1")
    assert mgc.main(["--check"]) == 1
    assert "xla_cuda13" in capsys.readouterr().out
    _fake_install(tmp_path, 13, "0.12.1")
    assert mgc.main(["--check"]) == 0
    assert "complete" in capsys.readouterr().out
