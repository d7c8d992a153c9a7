"""What changes a running gateway: its settings, reloads, the drain, what it learns.

``settings``: the config and profile it starts from; ``reload``: SIGHUP and file
changes; ``drain``: SIGTERM; ``learning``: refits, observations, the state file.
Each is handed what it reads and changes (the scheduler, the metrics, getters for the
settings in force), never the gateway.

May import edge, upstream, observe and errors; never admission, exchange or routes.
"""
