"""Assembling a process: `ledgerwire standalone` (standalone.py) and a cluster broker
(cluster_broker.py, cluster_services.py) from the rooms below, plus logging. Holds no protocol
or storage logic of its own.
"""
