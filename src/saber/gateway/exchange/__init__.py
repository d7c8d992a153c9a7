"""One completion request's response, once a route has accepted it: offered to the
scheduler, queued, relayed from the backend, finalized and answered.

``response``: the Exchange (a Starlette response); ``relay``: the backend's bytes to
the client; ``downstream``: the client's side; ``meter``: tokens counted as they pass.

May import assembly, admission, control, edge, upstream, observe, errors; never routes.
"""
