"""lerobot policies on the factory's datasets: a fast in-memory trainer whose checkpoints
``lerobot-eval`` scores in the ground truth and inside the model.

The edge between demofactory and lerobot's policies, like ``exporters`` is for its
datasets: lerobot is imported here, never in ``factory``.
"""
