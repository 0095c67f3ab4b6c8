"""Folders, above the model: reading and checking checkpoints, output folders that lose nothing, the files a model
folder carries (its card, its training history), the bundled tokenizer and model, and errors that name them."""
