"""Offline half of rcb: market logs, replay simulator, hindsight oracle, metrics, bidders."""
