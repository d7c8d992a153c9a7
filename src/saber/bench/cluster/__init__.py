"""``saber-bench cluster``: a pool of engine replicas, and the ways to serve a trace on
it (vLLM alone behind each router; the gateway's admission over the pool, placing by
chance or as a router would; several gateways), compared on the same seeded traces."""
