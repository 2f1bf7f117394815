"""flowli benchmark: workloads W1–W4 of BENCH.md (``python -m bench.run``)."""
