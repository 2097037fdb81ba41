"""Evaluation: frame and task fidelity of the world model, and policy-ranking agreement."""
