"""Reinforcement learning: CBRL's rewards, curriculum, posterior encoder and SAC, and run directories."""
