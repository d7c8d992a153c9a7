"""What can go wrong with a vLLM, on purpose: requests that fail or stall, and a
listener that refuses connections for a while, as a restarting vLLM does."""
