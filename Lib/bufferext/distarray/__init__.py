"""The Distributed Array Protocol (``__distarray__``) over extended buffers."""
