"""Profiles run at the same time (two notebooks, two threads) each read their own trace."""

import threading
from pathlib import Path

from kernels import CATALOG

from pallaslab.execute.profile import KERNEL, STEP, profile


def test_two_profiles_at_once_each_find_their_own_trace(tmp_path):
    fn, args = CATALOG["matmul_f32"].case()  # grid (4, 3, 2): 24 programs
    profile(fn, *args)  # compiled once, so the two below overlap in their traces
    shared = tmp_path / "traces"  # one trace_dir for both, as two notebooks might pass
    results: dict[int, object] = {}

    def profile_into(i: int) -> None:
        try:
            results[i] = profile(fn, *args, runs=20, trace_dir=str(shared))
        except Exception as err:  # reported by the assertion below
            results[i] = err

    threads = [threading.Thread(target=profile_into, args=(i,)) for i in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    errors = [r for r in results.values() if isinstance(r, Exception)]
    assert not errors, errors
    files = [Path(r.trace_file) for r in results.values()]
    assert len(set(files)) == 2 and all(f.is_file() for f in files)
    # Each trace lies in a folder of its own under the shared one.
    folders = {f.relative_to(shared).parts[0] for f in files}
    assert len(folders) == 2
    for r in results.values():
        # The kernel's own events are in each trace; its 24 grid steps too, unless XLA ran the
        # loop asynchronously across threads, where the iterations cannot be told apart (see
        # `_interpret_events`: seen after a process's first few profiles of one kernel).
        assert int((r.events.kind == KERNEL).sum()) == 1
        assert r.steps in (0, 24) and int((r.events.kind == STEP).sum()) == r.steps
