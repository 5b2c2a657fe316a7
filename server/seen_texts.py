"""Texts this server session saw in the editor: a digest of each version a document held.

A verification runs its baseline (the text it compares with) as code. The baseline comes from the
step history under ``.mtmc/history/``, which a cloned repository can carry, so it is used only when
this session saw that exact text in the editor (didOpen, didChange, or a step recorded in this
session); ``features/verify_kernel.py`` verifies against the reference alone otherwise.
"""

from __future__ import annotations

import hashlib
from collections import OrderedDict
from urllib.parse import unquote

# Digests kept per document (the oldest versions go first) and documents kept (closed ones too:
# a text seen before a close was seen). About 100 bytes an entry: at most a few MB in all.
MAX_PER_DOCUMENT = 1024
MAX_DOCUMENTS = 64
# Larger texts are recorded when opened and when a step is recorded, not on every change: hashing a
# 5 MB line on each keystroke would cost the event loop ~10 ms an edit.
MAX_HASHED_ON_CHANGE = 1 << 20


def digest(text: str) -> bytes:
    return hashlib.sha256(text.encode("utf-8", "surrogatepass")).digest()


class SeenTexts:
    """Per document URI, the digests of the texts the editor showed in this session (bounded, oldest out)."""

    def __init__(self, per_document: int = MAX_PER_DOCUMENT, documents: int = MAX_DOCUMENTS):
        self.per_document = per_document
        self.documents = documents
        self._digests: OrderedDict[str, OrderedDict[bytes, None]] = OrderedDict()

    def saw(self, uri: str, text: str) -> None:
        """The editor holds ``text`` for ``uri`` (opened, changed to it, or a step recorded with it)."""
        uri = unquote(uri)  # as pygls keys its documents
        digests = self._digests.pop(uri, None) or OrderedDict()
        self._digests[uri] = digests  # most recently used document last
        key = digest(text)
        digests.pop(key, None)
        digests[key] = None
        while len(digests) > self.per_document:
            digests.popitem(last=False)
        while len(self._digests) > self.documents:
            self._digests.popitem(last=False)

    def changed(self, uri: str, text: str) -> None:
        """A didChange left ``text``: recorded unless it is too large to hash on every edit."""
        if len(text) <= MAX_HASHED_ON_CHANGE:
            self.saw(uri, text)

    def seen(self, uri: str, text: str) -> bool:
        digests = self._digests.get(unquote(uri))
        return digests is not None and digest(text) in digests
