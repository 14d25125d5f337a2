"""The agent's budgets: the shared ``Budgets`` and observation policy of services/common/budgets.py (the
ModelService enforces the same), under the name the recipes import them by."""

from services.common.budgets import ELIDED, Budgets, elide_observations, truncate_observation

__all__ = ["ELIDED", "Budgets", "elide_observations", "truncate_observation"]
