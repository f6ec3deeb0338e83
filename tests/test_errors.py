"""Bad input gets a clear error naming the operand, the rule and the value."""

import traceback

import jax
import jax.numpy as jnp
import pytest
from jax.experimental import pallas as pl
from kernels import rand

import pallaslab
from pallaslab.cases import load_case
from pallaslab.errors import CaseError, IndexMapError, KernelSelectionError, NoKernelError
from pallaslab.model import select_kernel

BAD = "tests/cases/bad_cases.py"


def _call(index_map, block=(8, 128)):
    def fn(x):
        return pl.pallas_call(
            lambda x_ref, o_ref: None, out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype),
            grid=(2,), in_specs=[pl.BlockSpec(block, index_map)],
            out_specs=pl.BlockSpec((8, 128), lambda i: (i, 0)))(x)

    return fn


def test_index_map_returning_too_few_values():
    with pytest.raises(IndexMapError) as info:
        pallaslab.capture(_call(lambda i: (i,)), rand((16, 128)))
    msg = str(info.value)
    assert msg.startswith("args[0]: the index map <lambda> at ")
    assert "test_errors.py:" in msg
    assert "returns 1 block indices, but its block_shape (8, 128) has 2 dimensions" in msg
    assert "Rule: an index map returns exactly one block index per block dimension" in msg


def test_index_map_returning_floats():
    with pytest.raises(IndexMapError) as info:
        pallaslab.capture(_call(lambda i: (i / 2, 0)), rand((16, 128)))
    msg = str(info.value)
    assert msg.startswith("args[0]: the index map <lambda> at ")
    assert "returns a non-integer block index: output 0 has type float32" in msg
    assert "block indices must be integer scalars" in msg


def test_function_launching_no_kernel():
    with pytest.raises(NoKernelError, match=r"^sin\(\.\.\.\) launched no Pallas kernel"):
        pallaslab.capture(jnp.sin, rand((8,)))


def _user_kernel_that_fails(x_ref, o_ref):
    raise RuntimeError("my kernel is broken")  # the user's own line


def test_user_exception_surfaces_unwrapped_with_their_line_last():
    def fn(x):
        return pl.pallas_call(_user_kernel_that_fails,
                              out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype))(x)

    with pytest.raises(RuntimeError) as info:
        pallaslab.capture(fn, rand((8, 128)))
    assert type(info.value) is RuntimeError and str(info.value) == "my kernel is broken"
    last = traceback.extract_tb(info.value.__traceback__)[-1]
    assert last.name == "_user_kernel_that_fails" and last.filename == __file__


def test_user_shape_error_is_not_translated():
    def fn(x):
        return jnp.dot(x, x)  # (8, 3) @ (8, 3): the user's mistake, JAX's message

    with pytest.raises(TypeError, match="dot_general requires contracting dimensions"):
        pallaslab.capture(fn, rand((8, 3)))


@pytest.mark.parametrize(("spec", "message"), [
    (f"{BAD}", "is not of the form path/to/file.py:function"),
    ("tests/cases/nope.py:f", "no such file 'tests/cases/nope.py'"),
    (f"{BAD}:missing", "bad_cases.py defines no 'missing'"),
    (f"{BAD}:NOT_A_FUNCTION", "NOT_A_FUNCTION is a int, not a function"),
    (f"{BAD}:returns_array", "returns_array() returned ArrayImpl; a case returns (fn, args)"),
    (f"{BAD}:returns_one_tuple", "returned a tuple of 1; a case returns (fn, args)"),
    (f"{BAD}:fn_not_callable", "fn is a int, not callable"),
    (f"{BAD}:args_not_tuple", "args is a ArrayImpl, not a tuple"),
])
def test_case_errors(spec, message):
    with pytest.raises(CaseError) as info:
        load_case(spec)
    assert message in str(info.value)
    assert spec in str(info.value)


def test_kernel_selection_errors_list_the_kernels():
    from kernels import CATALOG

    fn, args = CATALOG["two_kernels"].case()
    cap = pallaslab.capture(fn, *args)
    with pytest.raises(KernelSelectionError, match=r"kernel index 5 is out of range: <lambda>"
                       r"\(\.\.\.\) launched 2 kernel\(s\): \[0\] matmul_kernel, \[1\] "
                       r"softmax_kernel"):
        select_kernel(cap, 5)
    with pytest.raises(KernelSelectionError, match="no kernel named 'nope'"):
        select_kernel(cap, "nope")
