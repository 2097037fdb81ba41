"""``factory view``: a local web page to look at an episode store.

factory view runs/gen.zarr                      # open the printed URL (with ?token=)
factory view data/pusht_heldout.zarr --port 0   # any free port

The page lists the episodes (sort and filter), plays one with its coverage curve, and
shows an episode generated inside the model from a seeded reset next to the ground truth
replaying the same actions from the same state (``eval transfer``, frame by frame). It
follows the teleop page's rules: a token, its own origin only, 127.0.0.1 by default.
"""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Annotated

import typer

from pipelines.cli_app import app
from pipelines.cli_teleop import web_warnings
from pipelines.console import err_console, user_errors

READ = (
    "read the store through the page (other web sites still cannot: requests from them are refused)"
)


@app.command()
@user_errors
def view(
    store: Annotated[Path, typer.Argument(help="Episode store to look at (read only).")],
    host: Annotated[str, typer.Option(help="Address to serve on.")] = "127.0.0.1",
    port: Annotated[int, typer.Option(help="Port (0: any free one).")] = 8766,
    token: Annotated[
        str | None,
        typer.Option(
            envvar="FACTORY_VIEW_TOKEN",
            show_envvar=False,
            help="The page's token (default: a new random one per session).",
        ),
    ] = None,
    no_token: Annotated[
        bool, typer.Option("--no-token", help="Ask for no token (loopback only).")
    ] = False,
) -> None:
    """Serve a web page that shows the episodes of a store, and replays generated ones."""
    from dataview import DataViewServer
    from factory.errors import FactoryError
    from factory.view import StoreView
    from teleop.viewers.access import check_token, is_loopback, new_token

    if no_token and not is_loopback(host):
        raise FactoryError(
            f"--no-token is allowed only on loopback, not --host {host}: anyone who can "
            "reach the port could read the store"
        )
    if token is not None and not no_token:
        check_token(token, host)
    chosen = None if no_token else (token or new_token())
    data = StoreView(store)
    server = DataViewServer(data, host=host, port=port, token=chosen)
    try:
        server.open()
        n = data.store.n_episodes
        err_console.print(
            f"view: {n} episodes of {store}; open {server.location}  (ctrl-c to stop)",
            soft_wrap=True,
            highlight=False,
            markup=False,
        )
        for line in web_warnings(host, server.port, no_token, READ):
            err_console.print(f"[yellow]warning:[/] {line}", soft_wrap=True, highlight=False)
        threading.Event().wait()
    except KeyboardInterrupt:
        err_console.print("view: stopped")
    finally:
        server.close()
        data.close()
