"""The executors themselves, one module per way of running a kernel (`interpret`,
`tpu_interpret`, `gpu_interpret`, `vectorized` with `vectorize_layout`, `device`,
`reference`), what each interpreter cannot run (`capabilities`, `semaphore_refusals`), which
one runs a kernel by default (`choice`, `auto`), and what a run's logs say (`diagnostics`).
They are declared to the registry in `pallaslab.execute.builtin`."""
