"""The admin surface: the HTTP API (api.py over http_server.py), consumer-group operations for
operators, and metrics. Reaches the system only through the services the protocols use.
"""
