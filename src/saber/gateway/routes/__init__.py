"""The HTTP face: one handler per route, each handed the Gateway that serves it.

``endpoints``: the OpenAI completion routes (checked, classified, handed to an
exchange) and the gateway's own (health, metrics, status); ``models``: the model
list; ``passthrough``: the backend's other routes; ``status``: /saber/status.

May import every layer below it: exchange, assembly, admission, control, edge,
upstream, observe, errors.
"""
