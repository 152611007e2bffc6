"""The `ledgerwire` command: argument parsing (main.py), one module per sub-command (commands/) and
the admin CLI's HTTP client and tables (admin/). Top of the house: it may import every room
below it.
"""
