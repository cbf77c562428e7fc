"""SeaStreamer stream files (``.ss``): a byte-compatible codec, reader, writer and Trio follower."""
