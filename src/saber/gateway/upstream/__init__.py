"""The backend: the one connection pool to it, its dialect, and the watch on its
health, kind and load.

May import observe and errors; nothing else of the gateway.
"""
