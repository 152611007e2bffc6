"""Configuration of a ledgerwire process: settings with their defaults (settings.py), read from
a TOML file and command-line flags (loading.py). Imports nothing else of gateway/.
"""
