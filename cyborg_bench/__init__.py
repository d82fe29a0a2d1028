"""cyborg-bench: a load generator for any Cyborg v2 compatible endpoint.

It drives the same workloads against our API, the reference Cyborg or
anything else that speaks the v2 API, so their figures can be compared
side by side (benchmarks/side_by_side.py, docs/performance.md).
"""
