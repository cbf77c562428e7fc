"""The Redis transport and the Trio-native client it is built on (``trio_streams.redis.client``)."""
