"""``factory``: the demofactory command line.

    factory demo                                   # the whole factory on the shipped model
    factory collect --env pusht --generator play --episodes 20 --out runs/play.zarr
    factory inspect runs/play.zarr --json
    factory train autoencoder --data runs/play.zarr --out runs/model --minutes 20
    factory eval fidelity --data data/pusht_heldout.zarr --json
    factory eval predictability --data data/pile_heldout.zarr --json
    factory teleop --device keyboard --out runs/teleop.zarr --task "push the T onto the goal"
    factory generate --generator expert --episodes 100 --out runs/gen.zarr
    factory export lerobot runs/gen.zarr runs/gen_lerobot --repo-id local/gen
    factory import lerobot runs/gen_lerobot runs/back.zarr
    factory view runs/gen.zarr
    factory bench rollout --json

Every bad input (a wrong path, a foreign store or model, an unknown generator, N <= 0) is
one line on stderr and exit code 2. The commands live in ``pipelines/cli_*.py``.
"""

from __future__ import annotations

from pipelines import (
    cli_data,
    cli_eval,
    cli_generate,
    cli_lerobot,
    cli_model,
    cli_teleop,
    cli_view,
)
from pipelines.cli_app import add_groups, app

__all__ = [
    "app",
    "cli_data",
    "cli_eval",
    "cli_generate",
    "cli_lerobot",
    "cli_model",
    "cli_teleop",
    "cli_view",
    "main",
]

add_groups()


def main() -> None:
    app()


if __name__ == "__main__":
    main()
