"""spark_bridge."""
