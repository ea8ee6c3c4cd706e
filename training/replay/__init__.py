"""Replay: the batched exact simulator, day sets, the paper's metrics and the hindsight oracles."""
