"""`%%pallas --tune bm=128,256,512 bk=128,256`: the cell's last line captured once per config,
the config's names bound in a copy of the notebook's namespace (the user's is left as it
was), ranked by `pallaslab.tuning.tune_captures`. A shell: it parses and delegates."""

from __future__ import annotations

import ast
from typing import Any

from IPython.core.error import UsageError

from pallaslab.magic.line import last_value, traced_line
from pallaslab.magic.user_code import capture_line, run_code


def tune_cell(shell: Any, filename: str, body: list[ast.stmt], last: ast.stmt,
              texts: list[str], compile_top: str | None, options: dict[str, Any]) -> Any:
    """Run the statements before the last line once, then tune the last line; the ranked
    `TuneResult` is the cell's value."""
    from pallaslab.tuning.search import tune_captures
    from pallaslab.tuning.space import TuneSpaceError, parse_params

    try:
        space = parse_params(texts, flag="--tune")
    except TuneSpaceError as err:
        raise UsageError(f"%%pallas: {err}") from None
    top = _compile_top(compile_top)
    ns = shell.user_ns
    flags = shell.compile.flags
    if body:
        module = ast.Module(body=body, type_ignores=[])
        run_code(compile(module, filename, "exec", flags=flags, dont_inherit=True), ns)
    expr, _ = last_value(last)
    chip = options["chips"][0] if options["chips"] else None

    def capture_of(config: dict[str, Any]) -> Any:
        bound = {**ns, **config}  # a copy: the notebook's names stay as they were
        return capture_line(traced_line(expr, filename, flags, bound), chip)

    targets = options["targets"]
    return tune_captures(capture_of, space, chip=options["chips"] or None,
                         target=targets[0] if targets else None, compile_top=top,
                         timeout=options["timeout"], progress=_progress_line())


def _progress_line() -> Any:
    """A line the notebook updates in place: `tuning: 12/40 configs judged`."""
    from IPython.display import Pretty, display

    handle = display(Pretty("tuning: starting"), display_id=True)

    def progress(done: int, total: int) -> None:
        if handle is not None:
            handle.update(Pretty(f"tuning: {done}/{total} configs judged"))

    return progress


def _compile_top(text: str | None) -> int:
    if text is None:
        return 3
    if not text.strip().isdigit():
        raise UsageError(f"%%pallas: --compile-top {text}: a whole number >= 0 (0: the model "
                         "only)")
    return int(text)
