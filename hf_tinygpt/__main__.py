"""`python -m hf_tinygpt`: the `hf-tinygpt` command."""

import sys

from .cli.commands import main

sys.exit(main())
