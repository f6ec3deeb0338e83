"""Every tutorial notebook runs top to bottom on the CPU (each executed once per session), in
the environment Binder builds from binder/ alone (`binder_env`)."""

import functools
import os
import re
import threading
from pathlib import Path

import nbformat
import pytest
from binder_env import binder_env_dir, binder_kernel
from nbclient import NotebookClient

NOTEBOOKS = sorted((Path(__file__).resolve().parents[1] / "notebooks").glob("*.ipynb"))


# mybinder.org guarantees 1 GB of memory to a session (and stops one above 2 GB): every tutorial
# stays within it, kernel and worker processes together.
BINDER_GUARANTEED_BYTES = 1_000_000_000
WIDGET = "application/vnd.jupyter.widget-view+json"
PEAK_PSS: dict[str, int] = {}  # notebook -> peak proportional set size while it ran


@functools.cache
def executed(path: Path) -> nbformat.NotebookNode:
    nb = nbformat.read(path, as_version=4)
    kernel = binder_kernel()
    with PeakPss() as peak:
        NotebookClient(nb, timeout=600, kernel_name=kernel,
                       resources={"metadata": {"path": str(path.parent)}}).execute()
    PEAK_PSS[path.name] = peak.bytes
    return nb


class PeakPss:
    """The peak, while in the block, of the memory of every process this one starts and their
    own children (a notebook's kernel and its worker processes), counted as the proportional
    set size with shared libraries counted once, whatever other processes on this machine map
    the same libraries: each process's anonymous memory, plus each mapped file's resident
    pages once for the group (the most any one of its processes has resident). Sampled every
    `interval` seconds."""

    def __init__(self, interval: float = 0.2):
        self.interval = interval
        self.bytes = 0
        self._stop = threading.Event()

    def __enter__(self) -> "PeakPss":
        # Workers earlier tests left to this process are not the notebook's: only processes
        # started from here on (the kernel and its workers) count.
        self._before = set(_descendants(os.getpid()))
        self._thread = threading.Thread(target=self._sample, daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()

    def _sample(self) -> None:
        while not self._stop.wait(self.interval):
            mine = [p for p in _descendants(os.getpid()) if p not in self._before]
            self.bytes = max(self.bytes, group_bytes(mine))


def _descendants(pid: int) -> list[int]:
    parents: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                ppid = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
            except (OSError, ValueError, IndexError):
                continue
            parents.setdefault(ppid, []).append(int(entry.name))
    found, todo = [], list(parents.get(pid, []))
    while todo:
        child = todo.pop()
        found.append(child)
        todo += parents.get(child, [])
    return found


def group_bytes(pids: list[int]) -> int:
    """Anonymous memory of `pids`, plus each file they map, resident, once."""
    anonymous = 0
    files: dict[str, int] = {}  # path -> the most resident bytes one process has of it
    for pid in pids:
        try:
            text = Path(f"/proc/{pid}/smaps").read_text()
        except OSError:  # gone already
            continue
        mine: dict[str, int] = {}
        path, rss = "", 0
        for line in text.splitlines():
            if _MAPPING.match(line):
                parts = line.split(None, 5)
                path = parts[5] if len(parts) > 5 and parts[5].startswith("/") else ""
            elif line.startswith("Rss:"):
                rss = int(line.split()[1]) * 1024
            elif line.startswith("Anonymous:"):
                anon = int(line.split()[1]) * 1024
                anonymous += anon if path else rss  # an unnamed mapping is all anonymous
                if path:
                    mine[path] = mine.get(path, 0) + rss - anon
        for name, size in mine.items():
            files[name] = max(files.get(name, 0), size)
    return anonymous + sum(files.values())


_MAPPING = re.compile(r"^[0-9a-f]+-[0-9a-f]+ ")


def text_of(name: str) -> str:
    """Everything the tutorial `name` printed, executed once per session."""
    return outputs_text(executed(next(p for p in NOTEBOOKS if p.name == name)))


def outputs_text(nb: nbformat.NotebookNode) -> str:
    return "".join(o.get("text", "") + str(o.get("data", {}).get("text/plain", ""))
                   for c in nb.cells if c.cell_type == "code" for o in c.get("outputs", []))


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_notebook_runs(path):
    errors = [o for c in executed(path).cells if c.cell_type == "code"
              for o in c.get("outputs", []) if o.get("output_type") == "error"]
    assert not errors
    peak = PEAK_PSS[path.name]
    print(f"{path.name}: peak memory {peak / 1e9:.2f} GB (kernel and workers, shared "
          "libraries once)")
    assert 0 < peak <= BINDER_GUARANTEED_BYTES, (
        f"{path.name} peaked at {peak / 1e9:.2f} GB, over the {BINDER_GUARANTEED_BYTES / 1e9:g} GB "
        "mybinder.org guarantees")


def test_quickstart_shows_fetches_and_the_race():
    text = text_of("00_quickstart.ipynb")
    # grid (8, 6, 4): x and y change block every step, the output once per (i, j)
    assert "args[0]  fetches= 192" in text and "outputs  fetches=  48" in text
    assert "error parallel-write-conflict" in text
    # the solutions: 256-blocks halve x's and y's traffic; a parallel k races, a parallel i does not
    assert "blocks 256: args[0]  fetches=  24  HBM bytes=   6,291,456" in text
    assert "('arbitrary', 'arbitrary', 'parallel') -> ['parallel-write-conflict']" in text
    assert "('parallel', 'arbitrary', 'arbitrary') -> []" in text


def test_grids_tutorial_solutions_show_the_revisit_and_the_partial_blocks():
    text = text_of("01_grids_and_blockspecs.ipynb")
    assert "outputs  fetches  12" in text and "args[0]  fetches  24" in text
    assert "output-revisit" in text and "uncovered-output" in text
    assert "[nan, nan, nan" in text  # half_grid's unwritten rows, as the text explains
    assert "semantics: arbitrary, parallel, parallel" in text
    assert "error output-revisit: outputs: 12 output block visit(s) are not consecutive" in text
    assert "info partial-block outputs programs ((5, 0), (5, 1), (5, 2), (5, 3))" in text


def test_pallas_cells_show_the_workbench_and_keep_their_value():
    nb = executed(next(p for p in NOTEBOOKS if p.name == "01_grids_and_blockspecs.ipynb"))
    magic_cells = [c for c in nb.cells
                   if c.cell_type == "code" and c.source.startswith("%%pallas")]
    assert len(magic_cells) >= 3
    for cell in magic_cells:
        shown = [o for o in cell.outputs if o.output_type == "display_data"]
        assert shown and WIDGET in shown[0].data and "text/html" in shown[0].data
        assert "Grid of kernel" in shown[0].data["text/plain"]
        results = [o for o in cell.outputs if o.output_type == "execute_result"]
        assert results and "Array(" in results[0].data["text/plain"]


def test_debugging_tutorial_finds_the_program_the_race_and_the_fit():
    text = text_of("02_debugging_a_kernel.ipynb")
    assert "mismatched blocks: ((2, 0),) | written by programs: ((2,),)" in text
    assert "program (2,) read args[0] block (3, 0)" in text
    # The race may also leave NaN from the accumulator's uninitialised VMEM: an
    # unwritten-output warning can follow the data race.
    assert "error parallel-write-conflict" in text and "tpu-interpret: ['data-race'" in text
    assert "448.0 KiB of 16.00 MiB scoped VMEM" in text
    assert "mosaic-tpu ok" in text and "tpu.matmul" in text
    assert "fixed double: all close" in text  # the solutions
    assert "arbitrary row_sum: findings [] | tpu-interpret: []" in text


def test_multi_device_tutorial_runs_the_ring_and_diagnoses_both_bugs():
    text = text_of("06_multi_device.ipynb")
    assert "devices in this notebook: 1" in text
    assert "ran on 4 simulated CPU devices in a worker process" in text
    assert ("Devices of kernel 0 all_gather_kernel: 4 devices, 16 DMAs: 12 between devices "
            "(49,152 B), 4 local copies (16,384 B) (in ring-step order)") in text
    assert re.search(r"^ +2  device 3  device 0 +4,096 ", text, re.M)
    assert "MISMATCH" in text and "step 0 transfers: [(0, 2), (1, 3), (2, 0), (3, 1)]" in text
    assert "was last written by the DMA of step 1 from device 2" in text
    assert "was written by no DMA" in text
    assert "error deadlock: every device is blocked" in text
    # the magic's workbench on --devices 4: every tab shows each device's kernel, 3 ring steps
    assert "grid 3 = 3 programs" in text and "traced on 4 simulated devices" in text
    # one ring step short: the unwritten slots, on every device
    assert ("warning unwritten-output: all_gather_kernel: outputs: 4,096 of 16,384 element(s) "
            "hold NaN after the run under tpu-interpret on device(s) 0, 1, 2, 3") in text
    # compiled by libtpu for the 4 chips of a v5e 2x2 slice
    assert "all_gather_kernel mosaic-tpu ok | compiled: True" in text
    assert ("info shard-map-mesh: kernel 'all_gather_kernel' runs inside shard_map (mesh x=1 as "
            "captured): it is compiled by libtpu inside shard_map over mesh x=4: one SPMD program "
            "of 4 partitions, for all 4 devices of the libtpu topology v5e:2x2") in text
    assert text.rstrip().endswith("all close")  # the solution of exercise 2 passes


def test_gpu_tutorial_judges_compiles_and_steps_both_backends():
    text = text_of("04_gpu_kernels.ipynb")
    assert "add -> no errors" in text and "overlapping -> ['parallel-write-conflict" in text
    assert "triton compiled: True" in text and ".target sm_90a" in text
    assert "blocks/SM" in text
    assert "executors chosen by default: gpu-interpret, reference" in text
    assert "after block (0,) : written 128 of 256" in text
    assert re.search(r"^ +barrier +\(\) +barrier +8$", text, re.M)  # Mosaic GPU's shared memory
    # Binder leaves XLA's CUDA plugin out (binder/requirements.txt): the Mosaic GPU compile
    # says what it needs (`make lab`'s environment has it: tests/lowering/ compile with it)
    assert "Compiling Mosaic GPU kernels needs XLA's CUDA 13 compiler (compile-only, no GPU; " \
        "jax-cuda13-pjrt and jax-cuda13-plugin" in text
    assert f"in {binder_env_dir() / 'venv' / 'mosaic-gpu-compiler'}, which lacks " in text
    assert text.rstrip().endswith("errors: []")


def test_in_kernel_pipelines_tutorial_shows_the_inner_grid_and_the_dmas():
    text = text_of("05_in_kernel_pipelines_and_dmas.ipynb")
    assert "inner pipeline matmul_step grid (2, 2, 2)" in text
    assert "x_ref: block (128, 128) of args[0], vmem, 2 buffers" in text
    assert "pipelined_matmul_kernel on v5e: 384.0 KiB of 16.00 MiB scoped VMEM" in text
    assert "nested pipeline 0: grid 2 x 2 x 2" in text
    assert "async copy; x_hbm (args[0], any) -> buf (scratch[0], vmem), 32,768 B" in text
    assert "MISMATCH" in text  # the slot read before its DMA landed
    assert "pipelined_matmul mosaic-tpu ok | compiled: True" in text
    # a pipeline per outer program: tiled over the kernel's grid x its own
    assert "nested pipeline 0" in text and \
        "grid 2 x 4 (the kernel's 2 x its own 4) = 8 programs" in text
    assert "per_program mosaic-tpu ok | compiled: True" in text
    # BoundedSlice windows: each step at its own size
    assert "step 1: rows 16:32 (16 rows), 8,192 B" in text
    assert "step 2: rows 32:40 (8 rows), 4,096 B" in text and "x: 3 fetches, 20,480 B" in text
    assert "ragged mosaic-tpu ok | compiled: True" in text
    # the recorded run: per line, and the prefetches alternating between the two slots
    assert ": 3 DMAs, 3 signals (98,304 B)" in text
    assert ": 4 DMAs, 4 signals, 4 completed waits (131,072 B)" in text
    assert "run #2: 32,768 B into buf[0, 0:64, 0:128]" in text
    assert "run #3: 32,768 B into buf[1, 0:64, 0:128]" in text
    # without the wait, only the write-back line ran: no DMA ever wrote the slots
    ran = re.findall(r"^ran: .*$", text, re.M)
    assert len(ran) == 1 and ran[0].endswith(": 4 DMAs, 4 signals, 4 completed waits (131,072 B)")
    # exercise 3: the outer program forgotten, half the output is never written
    assert "grid 4 = 4 programs" in text
    assert "warning uncovered-output: outputs: 16384 of 32768 elements (50.0%)" in text


def test_pipelining_tutorial_trades_traffic_against_vmem_and_asks_libtpu():
    text = text_of("03_tpu_pipelining_and_vmem.ipynb")
    assert "blocks 128:" in text and "HBM traffic 276,824,064 B" in text
    assert "blocks 512:" in text and "HBM traffic 75,497,472 B" in text
    assert "What-if: block sizes, best first" in text
    assert re.search(r"^ +2048 +fits no chip .* 40\.00 MiB \+ 16\.00 MiB ✗", text, re.M)
    assert "16384+4096 !!" in text and "no (18.36 MiB)" in text
    assert "blocks 512: compiled True, ok True | libtpu needs" in text
    assert "blocks 1024: compiled True, ok False" in text and "vmem-oom" in text
    assert "fits v5e's default limit: [512]" in text
    assert text.rstrip().endswith("libtpu compiles: [1024]")


def test_fuser_tutorial_shows_what_was_fused_and_whose_arrays():
    text = text_of("07_fused_kernels.ipynb")
    assert "1 kernel: scale_kernel" in text
    assert "(args[0][0] = x)" in text and "(args[0][1] = b)" in text
    assert "prologue -> args[0]" in text and "c:f32[64,128] = exp a" in text
    assert "epilogue applied to outputs" in text and "all close" in text
    assert text.rstrip().endswith("[('prologue', 'args[0]'), ('epilogue', 'outputs')]")


def test_tuning_tutorial_ranks_the_matmul_and_shows_the_tune_view():
    nb = executed(next(p for p in NOTEBOOKS if p.name == "08_tuning_block_sizes.ipynb"))
    text = outputs_text(nb)
    assert "best: {'bm': 512, 'bn': 512, 'bk': 2048}" in text
    assert "24 candidate(s): 21 ranked, 3 out; modelled on v5e, v6e" in text
    assert "does not fit v5e" in text
    # the result as a cell's value, and %%pallas --tune's: the live view, then its static copy
    views = [(o, nxt) for c in nb.cells if c.cell_type == "code"
             for o, nxt in zip(c.outputs, c.outputs[1:], strict=False)
             if WIDGET in o.get("data", {}) and "Tune" in o.data.get("text/plain", "")]
    assert len(views) == 2
    assert all("pl-saved-widget" in nxt.data["text/html"] for _, nxt in views)
    assert "9 candidate(s): 8 ranked, 1 out; modelled on v5e; not compiled" in text
    assert text.rstrip().endswith("f32 best: {'bm': 512, 'bn': 256, 'bk': 2048}")
