"""One security model: the ACL store, SCRAM credentials, tenant authorisation, and their assembly
from configuration (setup.py). Never imports the serving rooms.
"""
