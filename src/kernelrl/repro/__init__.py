"""Paper reproductions at CPU scale (`kernelrl repro TARGET`), one module per paper and one per report.

`drkernel` (Dr. Kernel), `direct_opd` (weak-to-strong Direct-OPD), `nki_agent` (NKI-Agent) and `proxy`
(proxy compression's scaling claim); each writes ``results.json`` (`record`: revision, config, every seed's
numbers, wall time) under a run directory, then ``report.md`` and a plot rendered from that file alone
(``*_report`` modules; `stats`: paired intervals and verdicts over seeds). Committed runs are in ``results/``,
the stale ones listed in ``results/KNOWN_STALE.toml``. This layer sits above `train`, `bench`, `agent` and
`proxy` and may import any of them; only `cli` imports it. Modules are imported on demand (no re-exports: each pulls in torch or the gym).
"""
