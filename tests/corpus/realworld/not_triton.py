"""Plain Python with no Triton at all: the analyzer must find nothing and say nothing."""
import json


def jit(fn):
    return fn


@jit
def looks_like_a_kernel(x_ptr, n, BLOCK):
    return [x_ptr, n, BLOCK]


class Loader:
    def load(self, path):
        with open(path) as handle:
            return json.load(handle)
