"""FastAPI bidding service (later issue). Must never import torch."""
