"""A least-recently-used store bounded by the bytes of what it holds (the worker's and checker's kept outputs)."""

from __future__ import annotations

from collections import OrderedDict
from typing import Any, Hashable, Iterator


class ByteBoundedLRU:
    """Values by key, least recently used first; keeping one past the byte budget drops the oldest."""

    __slots__ = ("_entries", "_bytes")  # no instance attributes: user code in the process cannot shadow a method

    def __init__(self) -> None:
        self._entries: OrderedDict[Hashable, tuple[Any, int]] = OrderedDict()
        self._bytes = 0

    @staticmethod
    def admits(size: int, budget: int) -> bool:
        """Whether a value of ``size`` bytes is worth keeping: one value may take a quarter of the budget."""
        return size <= budget // 4

    def get(self, key: Hashable) -> Any | None:
        """The value kept under ``key``, or None; a lookup is not a use (callers ``touch`` what they use)."""
        entry = self._entries.get(key)
        return None if entry is None else entry[0]

    def touch(self, key: Hashable) -> None:
        """Mark ``key`` as just used, so it is dropped last."""
        self._entries.move_to_end(key)

    def keep(self, key: Hashable, value: Any, size: int, budget: int) -> None:
        """Keep ``value`` (``size`` bytes) as the newest entry if ``admits``, then drop the oldest past ``budget``."""
        if not self.admits(size, budget):
            return
        if key in self._entries:
            self._bytes -= self._entries.pop(key)[1]
        self._entries[key] = (value, size)
        self._bytes += size
        while self._bytes > budget:
            self._bytes -= self._entries.popitem(last=False)[1][1]

    def items(self) -> Iterator[tuple[Hashable, Any]]:
        return ((key, entry[0]) for key, entry in self._entries.items())

    def __contains__(self, key: object) -> bool:
        return key in self._entries

    def __iter__(self) -> Iterator[Hashable]:
        return iter(self._entries)

    def __len__(self) -> int:
        return len(self._entries)
