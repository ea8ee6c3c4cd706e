"""rcb: ROI-constrained bidding (CBRL, KDD'22), trained offline, served online."""

__version__ = "0.1.0"
