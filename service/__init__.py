"""The FastAPI bidding service: campaign state in a store, a slot update decides the next ratio, bids score
impressions at ratio x utility (docs/http-api.md). Never imports torch, pandas or training/."""
