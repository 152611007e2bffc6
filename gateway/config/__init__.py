"""Configuration of a ledgerwire process: settings with their defaults, a TOML file, command-line
flags (settings.py). Imports nothing else of gateway/.
"""
