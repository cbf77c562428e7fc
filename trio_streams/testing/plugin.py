"""The pytest plugin (entry point ``trio_streams``): fixtures for testing trio-streams apps."""
