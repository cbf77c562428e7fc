"""Running apps as services: worker processes, their supervisor, HTTP endpoints."""
