"""RocketMQ broker request handlers, one module per family; dispatch.py maps codes to them."""
