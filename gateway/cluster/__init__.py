"""Who owns what in a cluster: the broker registry, bundle ownership with fencing hand-offs, and
the peer client brokers use to reach each other. Never imports the serving rooms.
"""
