"""Bundled example Triton files: the default input of `mtmc demo` and the tests."""
