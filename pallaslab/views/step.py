"""The Step view: run a kernel program by program and look inside the last one.

`step_payload` is the pure function the widget, the report and the tests share: the current
program on the grid, each operand's block as the program read it and as it left it (heatmaps:
float32 binary buffers, downsampled past `BLOCK_SIDE` cells a side), and the program's kernel
body equation by equation with its Python line and a summary of every value.

The live widget drives a `pallaslab.execute.Stepper` through its `selection` trait: it sets
`{"action": "step" | "back" | "goto" | "reset" | "run_to_mismatch", "n": ..., "program": [...],
"nonce": ...}` and `StepView` answers with a new payload (`revision` bumped). The stepper is made
on first use, over the same call the Compare view compared (see `Session`), so "run to next
mismatch" stops at the programs the comparison blamed.

"""

from __future__ import annotations

import functools
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, TypedDict

import numpy as np

from pallaslab.analysis.inspection import caller_names, operand_labels
from pallaslab.analysis.tiling import Tiling, tiling_unavailable_reason
from pallaslab.errors import PallasLabError
from pallaslab.model import Kernel
from pallaslab.util.text import strip_ansi
from pallaslab.views._html import visible_payload
from pallaslab.views.arrays import downsample, to_2d
from pallaslab.views.base import InteractiveView
from pallaslab.views.context import KernelContext
from pallaslab.views.names import source_name
from pallaslab.views.parts import Section, to_html, to_text
from pallaslab.views.registry import register_tab
from pallaslab.views.session import Session
from pallaslab.views.step_devices import DeviceStepView, device_count, device_steppable
from pallaslab.views.step_tree import step_tree

if TYPE_CHECKING:
    from pallaslab.execute import Comparison, ProgramBlocks, Stepper
    from pallaslab.model._jax import EquationValue

PAYLOAD_VERSION = 1
BLOCK_SIDE = 128  # block heatmaps: at most this many cells per side (mean-downsampled beyond)
MAX_EQUATIONS = 400  # equations of one program sent / rendered
MAX_TEXT = 240  # characters of one equation's text or value summary
SMALL_VALUE = 8  # values with at most this many elements are shown in full
MAX_MISMATCH_STEPS = 4096
# Contexts where the stepper may find no single launch to step (a scan steps its first one).
LOOP_CONTEXTS = ("while", "cond", "vmap", "batch", "shard_map", "map", "fori", "scan[length=0]")


# --- the payload -----------------------------------------------------------------------------


class HeatMap(TypedDict):
    rows: int  # cells drawn
    cols: int
    shape: list[int]  # the 2-D array the cells cover (elements)
    factor: list[int]  # elements per cell along rows, cols
    note: str | None  # how the array was reduced to 2-D, if it was


class StepBlock(TypedDict):
    origin: str
    param: str | None  # the kernel function's parameter name ("x_ref")
    label: str  # "x_ref (args[0])", "x_ref (args[0] = x)": how the views name it
    role: str
    dtype: str
    block_index: list[int]
    start: list[int]
    block_shape: list[int]
    changed: bool
    heat: HeatMap
    before: int  # table index: float32 rows*cols, the block as read
    after: int  # ... as written
    lo: float | None  # finite value range over before and after (shared colour scale)
    hi: float | None
    summary_before: str
    summary_after: str


class StepEquation(TypedDict):
    index: int
    primitive: str
    text: str
    source: str | None  # "file.py:LINE"
    values: list[str]  # one summary per output


class StepPayload(TypedDict):
    version: int
    kernel: str
    index: int
    grid: list[int]
    programs: int
    position: int  # programs run
    step: int | None  # the last program's step (position - 1), None before any
    program: list[int] | None
    blocks: list[StepBlock]
    equations: list[StepEquation]
    equations_total: int
    mismatch_steps: list[int]  # steps (execution order) that wrote a mismatched block
    has_comparison: bool
    interactive: bool
    revision: int
    error: str | None
    tables: list[memoryview]
    notes: list[str]  # how the programs run, when it is not the usual way (the stepper's notes)


def step_payload(kernel: Kernel, tiling: Tiling, *, position: int = 0,
                 blocks: Mapping[str, ProgramBlocks] | None = None,
                 equations: Sequence[EquationValue] | None = None,
                 mismatch_steps: Sequence[int] = (), has_comparison: bool = False,
                 interactive: bool = False, revision: int = 0, error: str | None = None,
                 callers: Mapping[str, str] | None = None,
                 notes: Sequence[str] = ()) -> StepPayload:
    """Everything the step widget shows, from the stepper's state (pure).

    `callers`: input origin -> the caller's expression for it, shown in the labels.
    """
    tables: list[np.ndarray] = []
    labels = operand_labels(kernel, callers)
    step = position - 1 if position > 0 else None
    out_blocks = []
    if step is not None and blocks:
        out_blocks = [_block(b, kernel, tables, labels[b.origin]) for b in blocks.values()]
    eqs = list(equations or ())
    return visible_payload(StepPayload(
        version=PAYLOAD_VERSION, kernel=kernel.name, index=kernel.index,
        grid=list(tiling.grid), programs=tiling.programs, position=position, step=step,
        program=list(tiling.program_at(step)) if step is not None else None,
        blocks=out_blocks,
        equations=[equation_entry(e, kernel) for e in eqs[:MAX_EQUATIONS]],
        equations_total=len(eqs),
        mismatch_steps=sorted(int(s) for s in mismatch_steps)[:MAX_MISMATCH_STEPS],
        has_comparison=has_comparison, interactive=interactive, revision=revision,
        error=error, tables=[memoryview(t) for t in tables], notes=list(notes),
    ))


def _block(b: ProgramBlocks, kernel: Kernel, tables: list[np.ndarray], label: str
           ) -> StepBlock:
    op = kernel.operand(b.origin)
    before2, heat = block_heat(b.read)
    after2, _ = block_heat(b.written)
    both = np.concatenate([before2.ravel(), after2.ravel()])
    finite = both[np.isfinite(both)]
    tables += [before2.astype("<f4").ravel(), after2.astype("<f4").ravel()]
    return StepBlock(
        origin=b.origin, param=op.param, label=label, role=op.role, dtype=str(b.read.dtype),
        block_index=list(b.block_index), start=list(b.start), block_shape=list(b.read.shape),
        changed=b.changed, heat=heat, before=len(tables) - 2, after=len(tables) - 1,
        lo=float(finite.min()) if finite.size else None,
        hi=float(finite.max()) if finite.size else None,
        summary_before=summarize(b.read), summary_after=summarize(b.written))


def equation_entry(e: EquationValue, kernel: Kernel | None = None) -> StepEquation:
    # colour first: cutting a coloured jaxpr line can split an escape sequence in two
    return StepEquation(index=e.index, primitive=e.primitive, text=_cap(strip_ansi(e.text)),
                        source=source_name(e.source, kernel),
                        values=[summarize(v) for v in e.outputs])


def block_heat(block: np.ndarray) -> tuple[np.ndarray, HeatMap]:
    x2, note = to_2d(_as_float(block), squeeze=True)
    cells, (fr, fc) = downsample(x2.astype(np.float64), BLOCK_SIDE, "mean")
    heat = HeatMap(rows=int(cells.shape[0]), cols=int(cells.shape[1]), shape=list(x2.shape),
                   factor=[fr, fc], note=note)
    return cells.astype(np.float32), heat


def _as_float(x: np.ndarray) -> np.ndarray:
    x = np.asarray(x)
    if np.issubdtype(x.dtype, np.complexfloating):
        return np.abs(x).astype(np.float64)
    try:
        return x.astype(np.float64)
    except (TypeError, ValueError):
        return np.zeros(x.shape, np.float64)


def summarize(value: Any) -> str:
    """A short text for a value: small ones in full, arrays as dtype[shape] and statistics."""
    x = np.asarray(value)
    head = f"{x.dtype}[{','.join(map(str, x.shape))}]"
    if x.size <= SMALL_VALUE:
        body = np.array2string(x, precision=5, separator=", ", threshold=SMALL_VALUE)
        return _cap(f"{head} {body}" if x.ndim else f"{x.dtype} {body}")
    f = _as_float(x)
    finite = f[np.isfinite(f)]
    parts = [head]
    if finite.size:
        parts.append(f"min {finite.min():.5g} max {finite.max():.5g} mean {finite.mean():.5g}")
    nan = int(np.isnan(f).sum())
    if nan:
        parts.append(f"{nan:,} NaN")
    return _cap(" ".join(parts))


def _cap(text: str) -> str:
    return text if len(text) <= MAX_TEXT else text[: MAX_TEXT - 1] + "…"


def comparison_steps(comparison: Comparison | None, kernel: Kernel, tiling: Tiling
                     ) -> list[int]:
    """Steps of `kernel` that wrote a block found mismatched by any pair of the comparison."""
    if comparison is None:
        return []
    steps: set[int] = set()
    for out in comparison.outputs:
        if out.kernel != kernel.index:
            continue
        for pair in out.pairs:
            steps.update(tiling.step_of(p) for p in pair.programs if len(p) == len(tiling.grid))
    return sorted(steps)


# --- the view --------------------------------------------------------------------------------


class StepView(InteractiveView):
    """One kernel stepped program by program (the stepper is made on first use)."""

    name = "step"
    module = "step.js"

    def __init__(self, ctx: KernelContext):
        if ctx.tiling is None and ctx.kernel.kind != "mesh":
            raise PallasLabError(f"kernel {ctx.kernel.name!r} cannot be stepped: "
                                 f"{tiling_unavailable_reason(ctx.kernel)}")
        self.ctx = ctx
        self.error: str | None = None
        self._revision = 0

    @property
    def session(self) -> Session | None:
        return self.ctx.session

    @functools.cached_property
    def stepper(self) -> Stepper:
        """The stepper (compiled on first use, over the session's call)."""
        from pallaslab.execute import Stepper

        if self.session is None:
            raise PallasLabError(f"kernel {self.ctx.kernel.name!r} has no capture to re-run")
        fn, args, kwargs = self.session.call_args()
        return Stepper(fn, args, kwargs, kernel=self.ctx.kernel.index)

    @functools.cached_property
    def tiling(self) -> Tiling:
        """The grid's tiling; a TPU mesh kernel's comes from its stepper (programs = cores)."""
        return self.ctx.tiling if self.ctx.tiling is not None else self.stepper.tiling

    @property
    def started(self) -> bool:
        return "stepper" in self.__dict__

    def mismatch_steps(self) -> list[int]:
        s = self.session
        return comparison_steps(s.comparison if s else None, self.ctx.kernel, self.tiling)

    # --- actions (each updates the live widget) ---------------------------------------------

    def step(self, n: int = 1) -> StepView:
        return self._do(lambda st: st.step(n))

    def back(self, n: int = 1) -> StepView:
        return self._do(lambda st: st.back(n))

    def goto(self, program: Sequence[int]) -> StepView:
        return self._do(lambda st: st.goto(tuple(int(p) for p in program)))

    def reset(self) -> StepView:
        return self._do(lambda st: st.reset())

    def run_to_mismatch(self) -> StepView:
        """Run (or go back) to the next program after the current one that writes a block
        the comparison found mismatched; without one, stay and say so."""
        steps = self.mismatch_steps()
        if not steps:
            self.error = "no comparison with mismatches: run compare_workbench(wb, ...) first"
            return self._refresh()
        position = self.stepper.position if self.started else 0
        later = [s for s in steps if s >= position]
        if not later:
            self.error = (f"no program after step {position - 1} writes a mismatched block "
                          f"(the first is step {steps[0]}: program "
                          f"{self.tiling.program_at(steps[0])})")
            return self._refresh()
        return self.goto(self.tiling.program_at(later[0]))

    def _do(self, action: Callable[[Stepper], Any]) -> StepView:
        self.error = None
        try:
            action(self.stepper)
        except (PallasLabError, IndexError, ValueError) as err:
            self.error = str(err)
        return self._refresh()

    def _refresh(self) -> StepView:
        self._revision += 1
        self._push()
        return self

    # --- payload and widget -------------------------------------------------------------------

    def _payload(self, *, live: bool) -> StepPayload:
        st = self.stepper if self.started else None
        position = st.position if st is not None else 0
        blocks = equations = None
        error = self.error
        notes = list(st.notes) if st is not None else []
        if st is not None and position:
            blocks = st.blocks()
            try:
                equations = st.equations()
            except NotImplementedError as err:  # this kind of body has no equations to show
                notes.append(f"equations unavailable: {err}")
            except Exception as err:  # the body could not be evaluated eagerly: say why
                error = error or f"equations unavailable: {err}"
        s = self.session
        return step_payload(self.ctx.kernel, self.tiling, position=position, blocks=blocks,
                            equations=equations, mismatch_steps=self.mismatch_steps(),
                            has_comparison=bool(s and s.comparison is not None),
                            interactive=live, revision=self._revision, error=error,
                            callers=caller_names(self.ctx.capture, self.ctx.kernel,
                                                 self.ctx.options.get("arg_names")),
                            notes=notes)

    def _on_selection(self, change: Mapping[str, Any]) -> None:
        if (sel := self._new_action(change)) is not None:
            handle_action(self, sel)

    # --- static forms -------------------------------------------------------------------------

    def tree(self) -> Section:
        """The stepped kernel as one tree (`step_tree`): what the text and HTML render."""
        return step_tree(self._payload(live=False), self.tiling.program_at)

    def to_text(self) -> str:
        return to_text(self.tree())

    def to_html(self) -> str:
        return to_html(self.tree())




def handle_action(view: StepView, sel: Mapping[str, Any]) -> StepView:
    """Apply one widget action to a step view."""
    action = sel.get("action")
    n = max(1, int(sel.get("n") or 1))
    if action == "step":
        return view.step(n)
    if action == "back":
        return view.back(n)
    if action == "goto" and sel.get("program") is not None:
        return view.goto(sel["program"])
    if action == "reset":
        return view.reset()
    if action == "run_to_mismatch":
        return view.run_to_mismatch()
    view.error = f"unknown step action {action!r}"
    return view._refresh()


def steppable(ctx: KernelContext) -> bool:
    k = ctx.kernel
    if ctx.capture is None:
        return False
    if k.kind == "mesh":  # stepped core by core (TPU) or block by block (Mosaic GPU)
        from pallaslab.execute.stepping.core_stepper import talking_cores

        # cores that signal each other step together (pallaslab.step: CoreStepper), not
        # one program at a time as this view does
        return talking_cores(k) is None
    if k.kind != "pallas_call" or ctx.tiling is None:
        return False
    return not any(any(loop in c.lower() for loop in LOOP_CONTEXTS) for c in k.context)


def _available(ctx: KernelContext) -> bool:
    # a kernel inside shard_map in a workbench opened with devices=N: stepped on N devices
    return steppable(ctx) or device_steppable(ctx)


def _build(ctx: KernelContext, devices: int | None = None, **options: Any
           ) -> StepView | DeviceStepView:
    """The Step view: `devices=N` (or the workbench's) steps a kernel inside shard_map on N
    simulated devices (options: `call`, `timeout`); any other kernel program by program."""
    n = devices if devices is not None else device_count(ctx)
    if n is not None and ctx.kernel.device_mesh is not None:
        return DeviceStepView(ctx, n, **options)
    if devices is not None or options:
        raise PallasLabError(f"kernel {ctx.kernel.name!r} is not inside shard_map: the Step "
                             "view takes devices=/call= for kernels inside shard_map only")
    assert ctx.session is not None
    return ctx.session.step_view(ctx, StepView)


register_tab("step", order=60, title="Step", available=_available, build=_build)
