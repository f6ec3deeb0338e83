"""Deliberately malformed kernel cases for the CLI's error messages."""

import jax
import jax.numpy as jnp

NOT_A_FUNCTION = 3


def returns_array():
    return jnp.ones(3)


def returns_one_tuple():
    return (lambda x: x,)


def fn_not_callable():
    return 42, (jnp.ones(3),)


def args_not_tuple():
    return (lambda x: x), jnp.ones(3)


def no_kernel():
    return (lambda x: jnp.sin(x)), (jax.ShapeDtypeStruct((8,), jnp.float32),)


# --- the user's own code is wrong: the CLI shows their traceback, their line last ------------

from jax.experimental import pallas as pl  # noqa: E402

_SPEC = jax.ShapeDtypeStruct((8, 128), jnp.float32)


def _copy_kernel(x_ref, o_ref):
    o_ref[...] = x_ref[...]


def _copy(x, name=None):
    return pl.pallas_call(_copy_kernel, out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype),
                          name=name)(x)


def needs_arguments(size):
    return _copy, (jax.ShapeDtypeStruct((size, 128), jnp.float32),)


def raises_in_case():
    raise ValueError("the case itself is broken")  # USER-LINE: raises_in_case


def exits_in_case():
    raise SystemExit(3)


def _broken_kernel(x_ref, o_ref):
    raise RuntimeError("my kernel is broken")  # USER-LINE: _broken_kernel


def kernel_raises_while_tracing():
    def fn(x):
        return pl.pallas_call(_broken_kernel, out_shape=_SPEC)(x)

    return fn, (_SPEC,)


def _add_kernel(x_ref, y_ref, o_ref):
    o_ref[...] = x_ref[...] + y_ref[...]  # USER-LINE: _add_kernel


def wrong_shapes():
    """Operands the kernel cannot add: (8, 128) + (16, 128)."""
    def fn(x, y):
        return pl.pallas_call(_add_kernel, out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype))(x, y)

    return fn, (_SPEC, jax.ShapeDtypeStruct((16, 128), jnp.float32))


def _named(name):
    return (lambda x: _copy(x, name=name)), (_SPEC,)


# Kernel names that must be shown as text: rich markup, an emoji code, ANSI, bidi override.
def markup_closing_tag_name():
    return _named("[/]")


def markup_style_name():
    return _named("[bold]x")


def emoji_code_name():
    return _named(":b:")


def ansi_escape_name():
    return _named("\x1b[31mred\x1b[0m")


def bidi_override_name():
    return _named("abc\u202edcba")


def raises_markup_message():
    """An error message that must be shown as written: markup, an emoji code, ANSI, bidi."""
    raise ValueError("[bold]loud[/] :b: \x1b[2Jcleared \u202eevil")


def _accumulate_kernel(x_ref, o_ref):
    o_ref[...] += x_ref[...]


def long_grid():
    """200,000 quick programs: far longer than a 1-second time limit, yet finite (a test of
    the limit must not hang where the limit is not enforced)."""
    def fn(x):
        return pl.pallas_call(
            _accumulate_kernel, out_shape=_SPEC, grid=(200_000,),
            in_specs=[pl.BlockSpec((8, 128), lambda i: (0, 0))],
            out_specs=pl.BlockSpec((8, 128), lambda i: (0, 0)))(x)

    return fn, (jnp.ones((8, 128), jnp.float32),)
