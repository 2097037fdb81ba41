"""User-facing errors.

Anything raised as a :class:`FactoryError` is a problem with the user's input (a path, a
store, a checkpoint, an argument). The CLI prints its message on one line and exits with
code 2, without a traceback. Everything else is a bug and keeps its traceback.
"""

from __future__ import annotations


class FactoryError(Exception):
    """Bad input: the CLI reports ``str(err)`` on one line and exits 2."""


class StoreError(FactoryError):
    """A store is missing, corrupt, locked or otherwise unusable."""


class SchemaMismatchError(StoreError):
    """Data or an appended store does not match the store's schema."""


class StoreLockedError(StoreError):
    """Another process holds the store's writer lock."""


class ModelError(FactoryError):
    """A model directory is missing, foreign or does not fit the data or the world."""
