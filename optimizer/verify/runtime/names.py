"""Names the verifier's host side and its workers agree on (pure Python: the harness discovery imports it too)."""

# A file's ``if __name__ == "__main__":`` block, run as one test when it has no other harness (versions.py builds it,
# harness.py names it).
MAIN_TEST = "_mtmc_main_block"
