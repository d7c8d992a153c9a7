"""``saber-bench replay``: a recorded trace, cut into windows, served on the engine model."""
