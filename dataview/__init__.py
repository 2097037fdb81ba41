"""``factory view``: a local web page to look at an episode store (aiohttp).

The data it serves is made by :mod:`factory.view`; the page is ``static/``; who may open
it follows the teleop page's rules (:mod:`dataview.guard`).
"""

from dataview.server import DataViewServer

__all__ = ["DataViewServer"]
