"""Evaluation: the method registry, the offline harness, its report, learning curves, replay through a service."""
