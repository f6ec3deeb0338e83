"""A standing differential fuzzer for pallaslab's verdicts (Csmith/YARPGen style).

`grammar` draws a kernel *description* (frozen dataclasses in `spec`) from a seeded
`random.Random`, reproducible from (seed, index); `build` turns a description into a Pallas
function and `model` into its NumPy result, independently; `mutate` makes single-bug
variants; `runner` judges each kernel with pallaslab's `compare` and `check` against the
oracles and writes failing kernels out as case files (`casefile`). `python -m fuzz` (with
tests/ on PYTHONPATH, as `make fuzz` runs it) is the campaign.
"""
