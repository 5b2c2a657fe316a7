"""SeenTexts: the texts a session saw per document, bounded (issue 33: a verification's baseline must be one)."""

from mtmc_lsp.server.seen_texts import MAX_HASHED_ON_CHANGE, SeenTexts


def test_a_text_is_seen_only_for_its_document_and_uri_spellings_agree():
    seen = SeenTexts()
    seen.saw("file:///w/a%20b.py", "x = 1\n")
    assert seen.seen("file:///w/a b.py", "x = 1\n")
    assert not seen.seen("file:///w/a b.py", "x = 2\n") and not seen.seen("file:///w/c.py", "x = 1\n")


def test_old_versions_and_documents_go_first():
    seen = SeenTexts(per_document=3, documents=2)
    for version in range(5):
        seen.saw("file:///a.py", f"v{version}")
    assert [seen.seen("file:///a.py", f"v{v}") for v in range(5)] == [False, False, True, True, True]
    seen.saw("file:///b.py", "b")
    seen.saw("file:///a.py", "v4")  # a is used again: b is now the oldest document
    seen.saw("file:///c.py", "c")
    assert seen.seen("file:///a.py", "v4") and seen.seen("file:///c.py", "c") and not seen.seen("file:///b.py", "b")


def test_a_huge_text_is_recorded_when_opened_but_not_on_every_change():
    seen, huge = SeenTexts(), "x" * (MAX_HASHED_ON_CHANGE + 1)
    seen.changed("file:///a.py", huge)
    assert not seen.seen("file:///a.py", huge)
    seen.saw("file:///a.py", huge)
    assert seen.seen("file:///a.py", huge)
