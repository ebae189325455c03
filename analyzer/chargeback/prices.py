"""Prices per GPU model, from the policy's ``prices``, ``pricePerGpuHour`` and ``currency``."""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass, field

from common.errors import BadInputError
from common.thresholds import Pricing


@dataclass(frozen=True)
class Prices:
    default: float | None = None
    by_model: dict[str, float] = field(default_factory=dict)
    currency: str = "USD"

    @classmethod
    def of(cls, pricing: Pricing) -> Prices:
        return cls(pricing.price_per_gpu_hour, dict(pricing.prices), pricing.currency)

    def for_model(self, model: str) -> float | None:
        return self.by_model.get(model, self.default)

    def check(self, models: Collection[str]) -> None:
        """A price naming a model no GPU in the window has is a typo until shown otherwise."""
        unknown = sorted(set(self.by_model) - set(models))
        if unknown:
            raise BadInputError(
                f"prices: no GPU in the window has the model {', '.join(repr(u) for u in unknown)}; "
                f"models found (modelName): {', '.join(repr(m) for m in sorted(models) if m) or 'none'}"
            )
