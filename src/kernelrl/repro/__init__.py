"""Paper reproductions at CPU scale (`kernelrl repro TARGET`), one module per paper and one per report.

`drkernel` (Dr. Kernel), `direct_opd` (weak-to-strong Direct-OPD), `nki_agent` (NKI-Agent) and `proxy`
(proxy compression's scaling claim); each writes ``results.json``, ``report.md`` and a plot under a run
directory, and its ``*_report`` module re-renders them from ``results.json``. Committed runs are in
``results/``. This layer sits above `train`, `bench`, `agent` and `proxy` and may import any of them;
only `cli` imports it. Modules are imported on demand (no re-exports: each pulls in torch or the gym).
"""
