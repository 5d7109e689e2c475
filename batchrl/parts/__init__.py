"""Algorithm-agnostic pieces: normaliser, returns, episode memory."""
