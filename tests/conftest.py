"""Shared test configuration. Transport-specific fixtures live beside their tests."""
