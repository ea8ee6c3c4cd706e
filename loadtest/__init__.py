"""Open-loop HTTP load generator for the bidding service (see loadtest/README.md)."""
