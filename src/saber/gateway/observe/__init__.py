"""What the gateway reports: Prometheus metrics (and the collectors read at scrape
time, each handed a narrow view) and its structured logs.

The bottom of the gateway: every layer reports here; it imports nothing of the gateway.
"""
