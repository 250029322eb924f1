"""Greetings."""
