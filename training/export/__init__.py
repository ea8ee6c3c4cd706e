"""Export: a run (or ensemble, or the planner) as a model artifact; bid-scale calibration."""
