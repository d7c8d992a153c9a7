"""``saber-bench real``: the real loop, one seeded stream through the gateway and
straight to a live engine (``run_real``, a library call; ``cmd`` its command)."""
