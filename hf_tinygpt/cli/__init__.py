"""The `hf-tinygpt` command: `commands` holds the parser and the verbs, `start_up` what it does before anything
heavy is imported. Kept free of imports, so that the package can reach `start_up` before torch."""
