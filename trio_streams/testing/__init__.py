"""Testing support: run an app on in-process transports and assert on what it did."""
