"""RL agents: SAC with the indicator reward (Hard), its curriculum (CRL) and the Bayesian encoder (CBRL)."""
