"""Comparing runs: `comparison` (`compare`: every pair of executors that ran, each mismatched
output attributed to blocks and programs, with its causes from `pallaslab.execute.causes`),
`compare_args` (the caller's executors, reference and tolerances checked), `pair` (one pair
of outputs), `precision` (tolerances that follow the kernel's precision), `static_checks` and
`unwritten` (what the captured kernels say before any run), `device_mismatches` (a
multi-device mismatch traced to its shard and DMA)."""
