"""The transport conformance suite on this repository's own transports."""
