"""The ``object_set`` kind: worlds whose objects are a set of identical discs (pile).

State ``s`` (B, 2 + 2 N): the agent's x, y then every disc's x, y in board px (the store's
``state`` + ``task_state``). Parts: a GNS-style interaction network over the discs
(:mod:`.dynamics`), one learned homography renderer per camera (:mod:`.renderer`) and a
heatmap reader of the top camera (:mod:`.reader`); :mod:`.model` puts them behind the
rollout protocol.
"""
