"""What a training run is asked to do."""

# What `hf-tinygpt train` builds unless told otherwise: small enough to train on a CPU in minutes (the 50,257 × 64
# tied head is most of its 3.4 M parameters). TinyGPTConfig's own defaults are GPT-2 small's 124 M.
SMALL_MODEL = {"n_layer": 4, "n_embd": 64, "n_head": 4}
