"""What a client sent, read and checked at the edge: bodies, fields, the task type,
API keys, the client's honesty about its task, FIM and forwarding headers.

Pure functions and small classes over a request's bytes and headers: no scheduler,
no I/O beyond reading a body. May import upstream (the engine's dialect), observe
and errors.
"""
