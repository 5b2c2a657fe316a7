"""The MTMC engine: kernel analysis, hardware profiles, actions, verification, policy, search, training."""
