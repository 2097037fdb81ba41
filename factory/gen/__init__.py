"""Batched generation inside the world model (continuous batching), torch only, no Ray.

:class:`RolloutEngine` steps ``B`` episode slots of one model in lockstep, one generator per
slot closed-loop on what the model returns, and refills each finished slot with the next
:class:`GenJob` (the episode runner's refilling mode, :mod:`factory.record.runner`, over
the model's contexts); finished episodes come out as :class:`GeneratedEpisode` records with
full provenance. ``pipelines.generate`` runs one engine per Ray actor.
"""

from factory.gen.engine import RolloutEngine
from factory.gen.jobs import GeneratedEpisode, GenJob, SlotGenerator
from factory.gen.perturb import perturb_actions

__all__ = ["GenJob", "GeneratedEpisode", "RolloutEngine", "SlotGenerator", "perturb_actions"]
