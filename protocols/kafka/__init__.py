"""protocols/kafka."""
