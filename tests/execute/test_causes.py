"""Causes of a mismatch (pallaslab.execute.causes): the messages, the JSON contract, the
provenance arrays and the text, on real mutant kernels (tests/mutants)."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "mutants"))

import tpu_mutants
from mutant_registry import MUTANTS

import pallaslab
from pallaslab.execute.causes.dependence import guess
from pallaslab.execute.causes.text import block_set_text, source_text


def _line_of(text: str) -> str:
    lines = Path(tpu_mutants.__file__).read_text().splitlines()
    return f"tpu_mutants.py:{next(n for n, line in enumerate(lines, 1) if text in line)}"


def _compare(name):
    m = MUTANTS[name]
    fn, args = m.case()
    return pallaslab.compare(fn, *args, executors="vectorized,reference", reference=m.reference)


@pytest.fixture(scope="module")
def swapped():
    return _compare("matmul_y_map_swapped")


@pytest.fixture(scope="module")
def no_init():
    return _compare("row_sum_no_init")


def test_index_map_cause_names_operand_map_and_blocks(swapped):
    cause = next(c for c in swapped.outputs[0].causes if c.kind == "index-map")
    assert cause.operand == "args[1] (y_ref)"
    assert cause.line == _line_of("y_map=lambda i, j, kk: (j, kk)")
    assert ("the reference needs args[1] blocks (k, 0) for every k; the programs that wrote "
            "it read args[1] blocks (0, k) for every k: args[1]'s index map "
            f"`lambda i, j, kk: (j, kk)` ({cause.line}) looks transposed") in cause.message
    assert cause.programs[0] == (0, 0, 0)


def test_line_cause_counts_the_wrong_elements_by_their_writer(swapped):
    out = swapped.outputs[0]
    cause = next(c for c in out.causes if c.kind == "line")
    wrong = int(next(p for p in out.pairs if not p.allclose).mismatched_elements)
    store = _line_of("o_ref[...] = out.astype(o_ref.dtype)")
    assert cause.line == store
    assert cause.message.startswith(f"outputs: {wrong:,} wrong elements, all last written by "
                                    f"{store} in programs (0, 0, 1), (0, 1, 1)")


def test_provenance_has_every_element_s_program_and_line(swapped):
    prov = swapped.outputs[0].provenance
    assert prov is not None and prov.complete
    assert prov.program_of.shape == prov.line_of.shape == swapped.outputs[0].shape
    assert prov.program_of.dtype == prov.line_of.dtype == np.int32
    assert set(prov.programs) == {(0, 0, 1), (0, 1, 1), (1, 0, 1), (1, 1, 1)}
    # output block (i, j) was last written by program (i, j, last k)
    assert prov.programs[prov.program_of[0, 200]] == (0, 1, 1)
    assert prov.lines[prov.line_of[0, 0]] == _line_of("o_ref[...] = out.astype(o_ref.dtype)")


def test_first_visit_names_the_reading_line_and_program(no_init):
    cause = next(c for c in no_init.outputs[0].causes if c.kind == "first-visit")
    assert cause.operand == "outputs (o_ref)"
    assert cause.line == _line_of("o_ref[...] += x_ref[...]")
    assert cause.programs == ((0,),)
    assert cause.message.startswith(
        f"outputs (o_ref) is read at {cause.line} by program (0,) before any program wrote it")


def test_json_gives_causes_per_output_and_mismatched_pair(swapped):
    out = swapped.to_json()["outputs"][0]
    assert [c["kind"] for c in out["causes"]] == ["index-map", "line"]
    assert set(out["causes"][0]) == {"kind", "operand", "line", "programs", "message", "through"}
    assert out["causes"][0]["programs"][0] == [0, 0, 0]
    assert out["pairs"][0]["causes"] == out["causes"]
    assert {"mismatched_blocks", "programs", "max_abs_err"} <= set(out["pairs"][0])


def test_text_lists_one_line_per_cause(swapped, capsys):
    from pallaslab.cli.compare import render

    lines = swapped.cause_lines()
    assert len(lines) == 2 and lines[0].startswith("outputs: index-map: outputs (o_ref) block")
    render(swapped)
    printed = " ".join(capsys.readouterr().out.split())
    assert "Why output outputs is wrong index-map: outputs (o_ref)" in printed
    assert "looks transposed" in printed


def test_block_sets_read_as_patterns():
    assert block_set_text({(k, 1) for k in range(4)}, [4, 2]) == "(k, 1) for every k"
    assert block_set_text({(0, 1), (2, 0)}, [4, 2]) == "(0, 1), (2, 0)"
    assert block_set_text(set(), [4]) == "no blocks"


def test_guesses_need_evidence():
    need = frozenset({(k, 1) for k in range(3)})
    assert guess(frozenset({(1, k) for k in range(3)}), need) == " looks transposed"
    assert guess(frozenset({(k, 2) for k in range(3)}), need) == " looks off by one"
    assert guess(frozenset({(0, 0)}), need) == ""


def test_index_map_text_is_the_lambda_itself():
    line = _line_of("pick=lambda i, idx_ref: (idx_ref[(i + 1) % 6], 0)")
    path = str(Path(tpu_mutants.__file__))
    assert source_text(f"{path}:{line.rsplit(':', 1)[1]}") == \
        "lambda i, idx_ref: (idx_ref[(i + 1) % 6], 0)"


# -- correct catalog kernels: forced to explain every block, they blame nothing ---------------

def _catalog_references():
    return {
        "matmul_f32": lambda x, y: x @ y,
        "reduction_revisited_output": lambda x: x.reshape(-1, 8, x.shape[1]).sum(0),
        "scalar_prefetch_gather": lambda idx, x: x.reshape(-1, 8, x.shape[1])[idx].reshape(
            -1, x.shape[1]),
        "squeezed_dims": None,
        "layer_norm": None,
        "elementwise_2d_add": lambda x, y: x + y,
    }


@pytest.mark.slow
@pytest.mark.parametrize("name", ["matmul_f32", "reduction_revisited_output",
                                  "scalar_prefetch_gather", "squeezed_dims", "layer_norm",
                                  "elementwise_2d_add"])
def test_correct_catalog_kernels_get_no_cause_even_when_asked(name):
    from kernels import CATALOG

    from pallaslab.analysis.tiling import tile
    from pallaslab.execute.causes.dependence import index_map_causes, reference_needs
    from pallaslab.execute.causes.provenance import record_provenance
    from pallaslab.execute.prepared import prepare

    fn, args = CATALOG[name].case()[:2]
    prepared = prepare(fn, args, {})
    kernel = prepared.capture[0]
    tiling = tile(kernel)
    recorded = record_provenance(prepared, kernel, tiling)
    assert recorded is not None and recorded.first_reads == ()
    for origin, prov in recorded.provenance.items():
        assert (prov.program_of >= 0).all(), f"{name}: {origin} has elements never written"
        assert recorded.causes_for(origin, np.zeros(prov.line_of.shape, bool)) == ()
    reference = _catalog_references()[name]
    if reference is not None:
        info = prepared.output_info[0]
        blocks = [tuple(int(v) for v in b)
                  for b in np.unique(tiling.operands[info.origin].block_indices, axis=0)]
        positions = prepared.capture.argument_positions(kernel)
        assert index_map_causes(kernel, tiling, info.origin, blocks, reference,
                                prepared.args, prepared.kwargs, 0, positions) == ()
        # ... and not for want of judging: the reference's dependence was found
        inputs = {op.origin: (positions[op.origin], tiling.operands[op.origin])
                  for op in kernel.inputs if op.origin in positions and not op.scalar_prefetch}
        needs = reference_needs(reference, prepared.args, prepared.kwargs, 0,
                                tiling.operands[info.origin], blocks, inputs)
        assert needs is not None
        assert all(need for per in needs.blocks.values() for need in per.values())


def test_an_aliased_output_read_in_place_is_no_first_visit():
    import jax
    from jax.experimental import pallas as pl

    from pallaslab.analysis.tiling import tile
    from pallaslab.execute.causes.provenance import record_provenance
    from pallaslab.execute.prepared import prepare

    def add_in_place(x, acc):
        def kernel(x_ref, acc_in, o_ref):
            del acc_in  # aliased with o_ref
            o_ref[...] += x_ref[...]  # reads the aliased input's values: initialised

        spec = pl.BlockSpec((128,), lambda i: (i,))
        return pl.pallas_call(kernel, out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype),
                              grid=(2,), in_specs=[spec, spec], out_specs=spec,
                              input_output_aliases={1: 0})(x, acc)

    x = tpu_mutants.rand((256,))
    prepared = prepare(add_in_place, (x, x), {})
    kernel = prepared.capture[0]
    recorded = record_provenance(prepared, kernel, tile(kernel))
    assert recorded is not None and recorded.first_reads == ()
    prov = recorded.provenance["outputs"]
    lines = Path(__file__).read_text().splitlines()
    store = next(n for n, line in enumerate(lines, 1) if "+= x_ref[...]  # reads" in line)
    assert prov.lines[prov.line_of[0]] == f"test_causes.py:{store}"
