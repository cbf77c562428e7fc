"""The transport conformance suite: each contract sentence stated once, run on every transport."""
