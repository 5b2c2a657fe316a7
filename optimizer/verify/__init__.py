"""Verification: harness discovery, isolated worker processes, correctness and timing checks, reward.

Public API (see docs/verification.md):
- ``verify_file(new_text, old_text, path, target, options, progress=None, cancel=None)`` ->
  ``VerificationReport`` (JSON-able through ``to_json``);
- ``WorkerPool`` (hold one in the server; workers start lazily, one per GPU or one interpreter worker);
- ``discover_harness`` / ``scaffold_get_inputs`` for the "no harness" diagnostic and its quick fix.
"""

from .api import VerifyOptions, build_job, pool_for, speed_within_noise, verify_file
from .harness import Harness, HarnessMissing, discover_harness, scaffold_get_inputs
from .pool import JobOutcome, WorkerPool, detect_gpus
from .report import Check, Mismatch, Reward, Scaffold, Speed, VerificationReport

__all__ = [
    "Check", "Harness", "HarnessMissing", "JobOutcome", "Mismatch", "Reward", "Scaffold", "Speed",
    "VerificationReport", "VerifyOptions", "WorkerPool", "build_job", "detect_gpus", "discover_harness",
    "pool_for", "scaffold_get_inputs", "speed_within_noise", "verify_file",
]
