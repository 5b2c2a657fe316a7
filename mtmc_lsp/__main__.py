import sys

from mtmc_lsp.cli import main

sys.exit(main())
