import os
import sys

# ``python -m mtmc_lsp`` without -P/-I put the working directory (an editor's workspace) first on
# sys.path: take it off before anything else is imported, so a workspace's json.py or pygls/ never
# shadows ours. (A workspace folder named mtmc_lsp/ wins before this runs: start with -P or -I.)
if not getattr(sys.flags, "safe_path", False) and sys.path and sys.path[0] in ("", os.getcwd()):
    del sys.path[0]

from mtmc_lsp.cli import main  # noqa: E402

sys.exit(main())
