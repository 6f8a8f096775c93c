"""Consumer offsets live with the message handlers (``messages.py``): they share the consumer resolution."""
