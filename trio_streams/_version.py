"""The package version, kept in one place for the build and ``trio-streams --version``."""

__version__ = "0.1.0"
