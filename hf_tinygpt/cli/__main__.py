"""`python -m hf_tinygpt.cli`: the `hf-tinygpt` command."""

import sys

from .commands import main

sys.exit(main())
