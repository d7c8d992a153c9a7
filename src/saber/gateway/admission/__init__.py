"""Admission: the pure scheduler driven from asyncio, and one request's way through it.

``driver``: futures, events and one timer around ``saber.scheduler.Scheduler``;
``flow``: one request from arrival to its one finish (and its metrics and log line);
``cost``: what a request costs the engine, as the scheduler is told; ``gate``: the
limit on the routes the scheduler does not admit.

May import edge, upstream, observe and errors; never control, exchange or routes.
"""
