"""Research probes: not packaged, not in any image. Run from the repository root: python -m research.NAME."""
