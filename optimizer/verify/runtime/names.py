"""What the verifier's host side and its workers agree on (stdlib only: the harness discovery imports it too)."""

import ast
import os
import shutil
from pathlib import Path

# A file's ``if __name__ == "__main__":`` block, run as one test when it has no other harness (versions.py builds it,
# harness.py names it).
MAIN_TEST = "_mtmc_main_block"


def main_block(tree: ast.Module) -> ast.If | None:
    """The module's top-level ``if __name__ == "__main__":`` block (either side of the ``==``), if any."""
    for node in tree.body:
        test = node.test if isinstance(node, ast.If) else None
        if (isinstance(test, ast.Compare) and len(test.ops) == 1 and isinstance(test.ops[0], ast.Eq)
                and {ast.unparse(test.left), ast.unparse(test.comparators[0])} in ({"__name__", "'__main__'"},
                                                                                  {"__name__", '"__main__"'})):
            return node
    return None


def remove_dead_owners_folders(parent: Path, prefix: str) -> None:
    """Remove the folders ``prefix + PID-...`` under ``parent`` whose process is gone (it was killed, never closed).

    Sandbox folders and output transfers carry the pid of the process that made them; what a killed one left in
    /tmp or /dev/shm would hold disk and shared memory until the machine restarts.
    """
    for path in parent.glob(prefix + "*"):
        pid = path.name[len(prefix):].split("-", 1)[0]
        if not pid.isdigit() or int(pid) == os.getpid():
            continue
        try:
            os.kill(int(pid), 0)
        except ProcessLookupError:
            shutil.rmtree(path, ignore_errors=True)
        except OSError:  # alive, another user's
            pass
