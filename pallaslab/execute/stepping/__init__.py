"""Stepping a kernel program by program: `stepper` (`step`, the API), `core_stepper` (one
TPU core's programs), `device_stepper` and `mesh_stepping` (several simulated devices or mesh
cores), `gated_run` (a run held between programs), `step_requests` and `step_worker` (the
requests the worker process answers)."""
