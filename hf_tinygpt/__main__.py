"""`python -m hf_tinygpt`: the `hf-tinygpt` command."""

import sys

from .cli import main

sys.exit(main())
