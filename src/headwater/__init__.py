"""Headwater: a persistent message-streaming server speaking Iggy and Kafka."""
__version__ = "0.1.0"
