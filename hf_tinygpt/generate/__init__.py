"""Generation: streamed text, compiled decoding and the int8 dot products it uses."""
