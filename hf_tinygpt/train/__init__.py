"""Training (the [train] extra): the settings, the run folder, the loop, and the token files it reads."""
