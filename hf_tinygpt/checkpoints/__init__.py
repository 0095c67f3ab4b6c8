"""Checkpoint I/O, above the model: reading and checking checkpoints, conversions both ways, verification against
GPT2LMHeadModel, output folders that lose nothing, Hub publishing and model cards."""
