"""A thread-safe in-memory LRU cache with a size budget, for the data view's images."""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Callable, Hashable
from typing import Any


class LruCache:
    """Keeps the most recently used values whose summed ``size`` (bytes, by default
    ``len(value)``) fits ``budget``; a value larger than the budget is returned but not
    kept. Values are built outside the cache's lock, so a slow build never blocks a hit."""

    def __init__(self, budget: int, size: Callable[[Any], int] = len) -> None:
        self.budget = int(budget)
        self._size = size
        self._items: OrderedDict[Hashable, tuple[Any, int]] = OrderedDict()
        self._used = 0
        self._lock = threading.Lock()
        self._building: dict[Hashable, threading.Lock] = {}
        self.hits = 0
        self.misses = 0

    def __len__(self) -> int:
        return len(self._items)

    @property
    def used(self) -> int:
        """Bytes held now."""
        return self._used

    def get(self, key: Hashable) -> Any | None:
        with self._lock:
            item = self._items.get(key)
            if item is None:
                return None
            self._items.move_to_end(key)
            return item[0]

    def put(self, key: Hashable, value: Any) -> None:
        n = int(self._size(value))
        with self._lock:
            old = self._items.pop(key, None)
            if old is not None:
                self._used -= old[1]
            if n > self.budget:
                return
            self._items[key] = (value, n)
            self._used += n
            while self._used > self.budget:
                _, (_, freed) = self._items.popitem(last=False)
                self._used -= freed

    def get_or_build(self, key: Hashable, build: Callable[[], Any]) -> Any:
        """The cached value of ``key``, or ``build()`` (then cached). Threads asking for
        the same missing key wait for one build instead of each running their own."""
        value = self.get(key)
        if value is None:
            with self._lock:
                building = self._building.setdefault(key, threading.Lock())
            with building:
                value = self.get(key)
                if value is None:
                    with self._lock:
                        self.misses += 1
                    try:
                        value = build()
                        self.put(key, value)
                    finally:
                        with self._lock:
                            self._building.pop(key, None)
                    return value
        with self._lock:
            self.hits += 1
        return value
