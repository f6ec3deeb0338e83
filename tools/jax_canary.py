"""The canary: the newest JAX the registry serves, met before users meet it.

`make test-jax-latest` runs this with Python 3.12 (standard library only). It builds a fresh
virtualenv with the newest jax and jaxlib, the libtpu that `jax[tpu]` asks for (or, where the
registry lacks it, the newest libtpu, and says so), XLA's CUDA plugin for Mosaic GPU compiles
where the registry has one for that jaxlib (and says which it lacks), everything else as
pins.txt pins it, and pallaslab editable. It runs the release tests there and prints one line
per failing test and one summary line. Not part of `make test`: a failure here is the next
piece of work, not a broken build.

`--refresh-pins PINS` rewrites the frozen part of the pin file from the virtualenv running
this script (`make pins`).
"""

from __future__ import annotations

import argparse
import dataclasses
import re
import subprocess
import sys
import time
import xml.etree.ElementTree as ET
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
# pins.txt's own JAX: the canary replaces these with the newest release.
JAX_PACKAGES = ("jax", "jaxlib", "libtpu")
FROZEN_MARKER = "# Everything `pip install -e"
CUDA_MAJORS = (13, 12)  # the CUDA plugin packages JAX publishes, newest first


@dataclasses.dataclass(frozen=True)
class Installed:
    """What the canary's virtualenv holds, each with a note where it differs from JAX's ask."""

    jax: str
    jaxlib: str
    libtpu: str | None
    libtpu_note: str
    cuda_plugin: str | None
    cuda_note: str

    def describe(self) -> str:
        parts = [f"jaxlib {self.jaxlib}", f"libtpu {self.libtpu or 'none'}{self.libtpu_note}",
                 f"CUDA plugin {self.cuda_plugin or 'none'}{self.cuda_note}"]
        return f"JAX {self.jax} ({', '.join(parts)})"


@dataclasses.dataclass(frozen=True)
class Outcome:
    """One test that did not pass: its id and the first line of why."""

    test: str
    kind: str  # "failed" or "error"
    message: str

    def line(self) -> str:
        return f"canary: {self.kind.upper()} {self.test}: {self.message}"


@dataclasses.dataclass(frozen=True)
class Tally:
    passed: int
    skipped: int
    not_passed: tuple[Outcome, ...]
    seconds: float

    def summary(self, installed: Installed, pinned_jax: str) -> str:
        failed = sum(o.kind == "failed" for o in self.not_passed)
        errors = len(self.not_passed) - failed
        counts = f"{self.passed} passed, {failed} failed, {errors} errors, {self.skipped} skipped"
        relation = ("the development pin" if installed.jax == pinned_jax
                    else f"newer than the development pin {pinned_jax}")
        verdict = "PASS" if not self.not_passed else "FAIL"
        return (f"canary {verdict}: {installed.describe()}, {relation}: {counts} "
                f"in {self.seconds:.0f} s")


# --- the registry -----------------------------------------------------------------------------

def registry_versions(python: Path, package: str) -> list[str]:
    """Every version of `package` the registry serves, newest first ([] when none)."""
    out = subprocess.run([str(python), "-m", "pip", "index", "versions", package],
                         capture_output=True, text=True)
    match = re.search(r"Available versions: (.*)", out.stdout)
    return [v.strip() for v in match.group(1).split(",")] if match else []


def libtpu_asked(requires: list[str]) -> str | None:
    """The libtpu version `jax[tpu]` pins, from jax's Requires-Dist lines (`libtpu==0.0.53.*`
    asks for 0.0.53 or a post-release of it: 0.0.53)."""
    for line in requires:
        if m := re.match(r"libtpu\s*==\s*(\d+(?:\.\d+)*).*extra\s*==\s*['\"]tpu['\"]",
                         line):
            return m.group(1)
    return None


def missing_cuda_plugins(jaxlib: str, available: dict[int, list[str]]) -> str:
    """A note naming the CUDA majors whose plugin the registry lacks for `jaxlib`."""
    return "".join(f"; no jax-cuda{m}-pjrt=={jaxlib} on the registry"
                   for m in CUDA_MAJORS if jaxlib not in available.get(m, []))


def installed_plugin(install_output: str) -> str | None:
    """"jax-cuda13 0.12.1" from the pip command `mosaic_gpu_compile --install` printed."""
    m = re.search(r"jax-cuda(\d+)-pjrt==(\S+)", install_output)
    return f"jax-cuda{m.group(1)} {m.group(2)}" if m else None


# --- the pin file -----------------------------------------------------------------------------

def pinned(pins_text: str) -> dict[str, str]:
    return {m.group(1).lower(): m.group(2)
            for m in re.finditer(r"^([A-Za-z0-9_.\-]+)==(\S+)", pins_text, re.M)}


def constraints_without_jax(pins_text: str) -> str:
    return "".join(line for line in pins_text.splitlines(keepends=True)
                   if line.split("==")[0].strip().lower() not in JAX_PACKAGES)


def refreshed_pins(pins_text: str, frozen: str) -> str:
    """`pins_text` with everything after its frozen-part marker replaced by `frozen` (a pip
    freeze), pallaslab itself and editable installs left out."""
    head, marker, _ = pins_text.partition(FROZEN_MARKER)
    if not marker:
        raise SystemExit(f"the pin file has no line starting {FROZEN_MARKER!r}")
    marker_line = marker + pins_text.partition(FROZEN_MARKER)[2].splitlines()[0]
    kept = [line for line in frozen.splitlines()
            if line and not line.startswith("-e") and not line.lower().startswith("pallaslab")]
    return head + marker_line + "\n" + "\n".join(kept) + "\n"


# --- the test run -----------------------------------------------------------------------------

def tally(junit_xml: str, seconds: float) -> Tally:
    """Counts and failures from pytest's JUnit XML."""
    root = ET.fromstring(junit_xml)
    passed = skipped = 0
    not_passed: list[Outcome] = []
    for case in root.iter("testcase"):
        test = f"{case.get('classname', '').replace('.', '/')}.py::{case.get('name')}"
        problem = next((c for c in case if c.tag in ("failure", "error")), None)
        if problem is not None:
            message = (problem.get("message") or problem.text or "").strip().splitlines()
            not_passed.append(Outcome(test, "failed" if problem.tag == "failure" else "error",
                                      message[0][:200] if message else "(no message)"))
        elif any(c.tag == "skipped" for c in case):
            skipped += 1
        else:
            passed += 1
    return Tally(passed, skipped, tuple(not_passed), seconds)


# --- building the virtualenv ------------------------------------------------------------------

def run(*args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    print("+", " ".join(args), flush=True)
    return subprocess.run(args, check=check, text=True, cwd=ROOT)


def build(venv: Path, pins: Path) -> Installed:
    subprocess.run([sys.executable, "-m", "venv", "--clear", str(venv)], check=True)
    python = venv / "bin" / "python"
    pip = [str(python), "-m", "pip", "install", "--quiet"]
    run(*pip, "--upgrade", "pip")
    jax = registry_versions(python, "jax")[0]
    jaxlib = registry_versions(python, "jaxlib")[0]
    constraints = venv / "constraints.txt"
    constraints.write_text(constraints_without_jax(pins.read_text()))
    run(*pip, f"jax=={jax}", f"jaxlib=={jaxlib}")
    requires = subprocess.run(
        [str(python), "-c", "import importlib.metadata as m; print('\\n'.join(m.requires('jax')))"],
        capture_output=True, text=True, check=True).stdout.splitlines()
    asked = libtpu_asked(requires)
    libtpus = registry_versions(python, "libtpu")
    matching = [v for v in libtpus if asked and (v == asked or v.startswith(asked + "."))]
    libtpu = matching[0] if matching else (libtpus[0] if libtpus else None)
    libtpu_note = "" if matching else f"; jax[tpu] asks for {asked}, not on the registry"
    extra = [f"libtpu=={libtpu}"] if libtpu else []
    project = [*pip, "-c", str(constraints), f"jax=={jax}", f"jaxlib=={jaxlib}", *extra,
               "-e", ".[gpu]", "pytest", "pytest-xdist"]
    if run(*project, check=False).returncode != 0:
        print(f"canary: the pinned set does not resolve with JAX {jax}; installing its other "
              "packages unpinned", flush=True)
        run(*[a for a in project if a not in ("-c", str(constraints))])
    available = {m: registry_versions(python, f"jax-cuda{m}-pjrt") for m in CUDA_MAJORS}
    cuda_note = missing_cuda_plugins(jaxlib, available)
    # pallaslab's own choice of CUDA plugin for this jaxlib, unpinned (pins.txt pins the
    # development jaxlib's).
    install = [str(python), "-m", "pallaslab.lowering.mosaic_gpu_compile", "--install",
               str(venv / "mosaic-gpu-compiler")]
    print("+", " ".join(install), flush=True)
    done = subprocess.run(install, text=True, capture_output=True, cwd=ROOT)
    print(done.stdout + done.stderr, end="", flush=True)
    plugin = installed_plugin(done.stdout + done.stderr) if done.returncode == 0 else None
    if plugin is None:
        cuda_note += "; installing the CUDA plugin failed"
    return Installed(jax, jaxlib, libtpu, libtpu_note, plugin, cuda_note)


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--venv", type=Path, default=ROOT / ".venv-jax-latest")
    parser.add_argument("--pins", type=Path, default=ROOT / "pins.txt")
    parser.add_argument("--refresh-pins", type=Path, metavar="PINS")
    parser.add_argument("pytest_args", nargs="*", help="after --: what pytest runs")
    args = parser.parse_args(argv)
    if args.refresh_pins:
        frozen = subprocess.run([sys.executable, "-m", "pip", "freeze"], capture_output=True,
                                text=True, check=True).stdout
        args.refresh_pins.write_text(refreshed_pins(args.refresh_pins.read_text(), frozen))
        print(f"{args.refresh_pins}: refreshed from {sys.prefix}")
        return 0
    venv = args.venv.resolve()
    installed = build(venv, args.pins)
    junit = venv / "canary.xml"
    env_python = venv / "bin" / "python"
    start = time.monotonic()
    subprocess.run(["env", "JAX_PLATFORMS=cpu",
                    f"PALLASLAB_MOSAIC_GPU_COMPILER={venv / 'mosaic-gpu-compiler'}",
                    str(env_python), "-m", "pytest", "-q", "-p", "no:cacheprovider",
                    f"--junitxml={junit}", *args.pytest_args], cwd=ROOT)
    result = tally(junit.read_text(), time.monotonic() - start)
    for outcome in result.not_passed:
        print(outcome.line())
    print(result.summary(installed, pinned(args.pins.read_text()).get("jax", "?")))
    return 1 if result.not_passed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
