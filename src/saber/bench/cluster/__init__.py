"""``saber-bench cluster``: a pool of engine replicas, and the ways to serve a trace on
it (for now vLLM alone behind each router), compared on the same seeded traces."""
