"""Register kernelrl's advantage estimators and policy losses in verl's registries as `kernelrl_<name>`."""

from __future__ import annotations

from typing import Any

from kernelrl.integrations.verl_estimators import adapt_estimator, dedicated_estimators
from kernelrl.integrations.verl_losses import adapt_loss

PREFIX = "kernelrl_"


def register_with_verl(estimators: Any = None, losses: Any = None) -> dict[str, str]:
    """Register kernelrl's advantage estimators and policy losses in verl as `kernelrl_<name>`.

    `estimators`/`losses` default to `kernelrl.rl.ADVANTAGE_ESTIMATORS` / `kernelrl.rl.POLICY_LOSSES`
    (registries or name -> function mappings). TRLOO, PRIME and Direct-OPD get their dedicated adapters
    (`trloo_for_verl`, `prime_for_verl`, `direct_opd_for_verl`), the rest the generic ones. Returns
    name -> "registered" or "skipped: <why>" (an input verl's interface does not carry).
    Raises ImportError with a clear message when verl or kernelrl.rl is missing.
    """
    try:
        from verl.trainer.ppo import core_algos
    except ImportError as exc:
        raise ImportError(f"verl is not importable ({exc}); install verl to register kernelrl's estimators") from exc
    if estimators is None or losses is None:
        try:
            import kernelrl.rl as rl
        except ImportError as exc:
            raise ImportError(f"kernelrl.rl is not available ({exc}); nothing to register with verl") from exc
        estimators = getattr(rl, "ADVANTAGE_ESTIMATORS", {}) if estimators is None else estimators
        losses = getattr(rl, "POLICY_LOSSES", {}) if losses is None else losses
    dedicated = dedicated_estimators()
    report: dict[str, str] = {}
    for kind, registry, adapt, add in (
        ("estimator", estimators, adapt_estimator, core_algos.register_adv_est),
        ("loss", losses, adapt_loss, core_algos.register_policy_loss),
    ):
        table = core_algos.ADV_ESTIMATOR_REGISTRY if kind == "estimator" else core_algos.POLICY_LOSS_REGISTRY
        for name in list(registry):
            fn = registry.get(name) if hasattr(registry, "get") else registry[name]
            verl_name = PREFIX + name
            special = dedicated.get(fn) if kind == "estimator" else None
            current = table.get(verl_name)
            if current is not None and (current is special or getattr(current, "__wrapped__", None) is fn):
                report[verl_name] = "registered"
                continue
            if special is not None:
                adapted = special
            else:
                try:
                    adapted = adapt(fn)
                except TypeError as exc:
                    report[verl_name] = f"skipped: {exc}"
                    continue
                adapted.__wrapped__ = fn  # type: ignore[attr-defined]
            table.pop(verl_name, None)
            add(verl_name)(adapted)
            report[verl_name] = "registered"
    return report
