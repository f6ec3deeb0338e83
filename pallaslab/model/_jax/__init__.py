"""The compat layer: the only code of pallaslab that touches `jax._src`.

Everything version-specific about how Pallas represents a kernel in a jaxpr lives in this
package, one module per responsibility:

- reading a call: `base` (imports, version gate, handles), `trace` (tracing, finding kernels,
  evaluating jaxprs, abstract TPUs), `arguments` (which flat arguments reach a kernel),
  `consumers` (what the computation does with a kernel's outputs), `element_ids` (which
  kernel output element each element of the function's outputs came from);
- reading a kernel: `kernels` (equation -> `Kernel`), `equation_fields` (its parts, read one
  way everywhere), `index_maps` (vectorized index maps), `param_names` (the body's parameter
  names), `nested` and `nested_outer` (in-kernel pipelines, scoped buffers, DMAs), `fusion`
  (what the fuser fused in), `stores` and `access_bounds` (what each program loads and stores),
  `block_accesses` (what each program touches inside its blocks, element by element),
  `verdict_facts` (how the body writes its outputs), `chips` (TPU chip facts, kernel bodies);
- running a kernel: `rerun` (re-binding kernels with other params), `rewrite` (jaxprs re-traced
  with equations replaced), `checks` (debug checks), `compiled` (compile caches), `vectorize`
  and `vectorize_blocks` (the batched executor's computation), `runner`, `stepper` and
  `mesh_runners` (one-program runners);
- what the interpreters say: `deadlock` and `device_record` (TPU interpret mode's threads and
  log), `barrier_record` (Mosaic GPU interpret mode's barriers and TMA copies), `log_recorder`;
- `lowering`: what the top-level `lowering` package needs (Mosaic modules, topologies, AOT
  compiles);
- `versions` (`TESTED_JAX`, `JAX_VERSION`): the modules that differ between JAX versions
  gate on it, here and nowhere else; `interpret_params` (the interpreters' parameters, the
  same meaning on every supported JAX).

Tested on the releases `versions.TESTED_JAX` lists (pins.txt pins them); any other JAX gets a
warning at import, and an error reading JAX's internals there names it (`pallaslab.errors`).
"""

from pallaslab.model._jax.barrier_record import BarrierRecorder
from pallaslab.model._jax.barrier_record import logging_mode as barrier_logging_mode
from pallaslab.model._jax.block_accesses import RecordedAccesses, record_block_accesses
from pallaslab.model._jax.body_values import BodyEvaluator
from pallaslab.model._jax.checks import debug_checks_enabled, instrument_kernel
from pallaslab.model._jax.chips import (
    constant_index_maps,
    kernel_body_cost,
    kernel_body_dots,
    kernel_body_values,
    tpu_chip_facts,
)
from pallaslab.model._jax.concrete_operands import concrete_kernel_operands
from pallaslab.model._jax.cross_call_semaphores import user_of as semaphore_user
from pallaslab.model._jax.deadlock import DeadlockWatch
from pallaslab.model._jax.device_record import DeviceRecorder
from pallaslab.model._jax.device_record import destination_from as remote_destinations
from pallaslab.model._jax.device_record import logging_mode as device_logging_mode
from pallaslab.model._jax.element_ids import ElementTrace, Untraced, trace_elements
from pallaslab.model._jax.fusion import fuser_sources
from pallaslab.model._jax.gpu_interpret_rules import (
    interpreter_rules as gpu_interpreter_rules,
)
from pallaslab.model._jax.gpu_interpret_rules import rule_notes as gpu_rule_notes
from pallaslab.model._jax.index_maps import eval_index_map_once
from pallaslab.model._jax.input_ids import InputTrace, trace_inputs
from pallaslab.model._jax.interpret_params import gpu_interpret_params, tpu_interpret_params
from pallaslab.model._jax.kernels import kernel_from_eqn
from pallaslab.model._jax.line_record import LineRecorder, NotRecordable, line_recorder
from pallaslab.model._jax.lowering import (
    MOSAIC_LOC_TAG,
    aot_compile_stablehlo,
    kernel_jaxpr_with_source_info,
    mosaic_tpu_module,
    tpu_topology_device,
    tpu_topology_devices,
)
from pallaslab.model._jax.param_names import kernel_arg_names
from pallaslab.model._jax.precision import narrow_dots
from pallaslab.model._jax.rerun import (
    jaxpr_callable,
    kernel_call_avals,
    kernel_callable,
    rewrite_kernels,
)
from pallaslab.model._jax.stepper import (
    RACE_LOGGER,
    EquationValue,
    full_dimension_semantics_params,
    is_pallas_call,
    kernel_leading_invars,
    kernel_operands,
    output_sources,
    program_equations,
    program_runner,
    semaphore_counts,
    tpu_interpret_buffers,
    uninitialized,
)
from pallaslab.model._jax.trace import (
    find_kernels,
    needs_concrete_values,
    trace,
)
from pallaslab.model._jax.versions import JAX_VERSION, SUPPORTED_JAX

__all__ = [
    "JAX_VERSION",
    "MOSAIC_LOC_TAG",
    "RACE_LOGGER",
    "SUPPORTED_JAX",
    "BarrierRecorder",
    "BodyEvaluator",
    "DeadlockWatch",
    "DeviceRecorder",
    "ElementTrace",
    "EquationValue",
    "InputTrace",
    "LineRecorder",
    "NotRecordable",
    "RecordedAccesses",
    "Untraced",
    "aot_compile_stablehlo",
    "barrier_logging_mode",
    "concrete_kernel_operands",
    "constant_index_maps",
    "debug_checks_enabled",
    "device_logging_mode",
    "eval_index_map_once",
    "find_kernels",
    "full_dimension_semantics_params",
    "fuser_sources",
    "gpu_interpret_params",
    "gpu_interpreter_rules",
    "gpu_rule_notes",
    "instrument_kernel",
    "is_pallas_call",
    "jaxpr_callable",
    "kernel_arg_names",
    "kernel_body_cost",
    "kernel_body_dots",
    "kernel_body_values",
    "kernel_call_avals",
    "kernel_callable",
    "kernel_from_eqn",
    "kernel_jaxpr_with_source_info",
    "kernel_leading_invars",
    "kernel_operands",
    "line_recorder",
    "mosaic_tpu_module",
    "narrow_dots",
    "needs_concrete_values",
    "output_sources",
    "program_equations",
    "program_runner",
    "record_block_accesses",
    "remote_destinations",
    "rewrite_kernels",
    "semaphore_counts",
    "semaphore_user",
    "tpu_chip_facts",
    "tpu_interpret_buffers",
    "tpu_interpret_params",
    "tpu_topology_device",
    "tpu_topology_devices",
    "trace",
    "trace_elements",
    "trace_inputs",
    "uninitialized",
]
