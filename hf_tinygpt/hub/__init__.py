"""Publishing to the Hugging Face Hub: staging a complete model repo and pushing it."""
