"""The macro policy inside the server: built from settings, loaded in the background, heuristic meanwhile."""

from __future__ import annotations

import threading
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from ..optimizer.actions.base import Candidate
    from ..optimizer.policy import Policy, PolicyState, Ranked

# optimizer.actions (and the policy and history, which import it) load libcst: imported where used,
# so the server starts fast and small.


def _policy_key(settings) -> tuple:
    return (settings.policy, settings.policy_model_path, settings.policy_adapter_path,
            settings.policy_endpoint, settings.policy_endpoint_model)


class Ranker:
    """Holds the policy ``settings.policy`` asks for; ranks with the heuristic until a model is ready."""

    def __init__(self) -> None:
        self._policy: Policy | None = None
        self._key: tuple | None = None
        self._fallback_policy: Policy | None = None
        self._lock = threading.Lock()  # one ranking at a time: model policies are not re-entrant

    @property
    def _fallback(self) -> Policy:
        if self._fallback_policy is None:
            from ..optimizer.policy import HeuristicPolicy

            self._fallback_policy = HeuristicPolicy()
        return self._fallback_policy

    def policy(self, settings) -> Policy:
        from ..optimizer.policy import make_policy

        key = _policy_key(settings)
        if self._policy is None or key != self._key:
            if self._policy is not None:
                self._policy.close()
            self._policy, self._key = make_policy(settings), key
        return self._policy

    def model_state(self, settings) -> str:
        """``mtmc/status``'s model field: "off" for the heuristic, else the model's loading state."""
        if settings.policy == "heuristic":
            return "off"
        if self._policy is None or _policy_key(settings) != self._key:
            return "not loaded"  # built on the first ranking, not at start (it imports libcst and numpy)
        policy = self._policy
        if policy.name == "heuristic":  # the model was asked for but cannot run (reason in describe())
            return "off"
        return "off" if policy.status == "failed" else policy.status

    @property
    def fallback_name(self) -> str:
        return "heuristic"

    def fallback_rank(self, state: PolicyState, candidates: list[Candidate]) -> list[Ranked]:
        """The heuristic's order (instant): what a request gets while the model is busy or loading."""
        return self._fallback.rank(state, candidates)

    def is_cheap(self, settings) -> bool:
        """True when ranking is the heuristic (no model inference to wait for)."""
        return settings.policy == "heuristic" or self.policy(settings).name == "heuristic"

    def describe(self, settings) -> str:
        return self.policy(settings).describe()

    def rank(self, settings, state: PolicyState, candidates: list[Candidate]) -> tuple[list[Ranked], str]:
        """Candidates best first, and the name of the policy that ranked them (runs in a worker thread)."""
        policy = self.policy(settings)
        if policy.status != "ready":
            policy.start_loading()  # the model ranks the next request; the heuristic ranks this one
            policy = self._fallback
        with self._lock:
            try:
                return policy.rank(state, candidates), policy.name
            except Exception:
                if policy is self._fallback:
                    raise
                return self._fallback.rank(state, candidates), self._fallback.name

    def close(self) -> None:
        if self._policy is not None:
            self._policy.close()
