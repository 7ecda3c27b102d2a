"""specharness: a benchmark harness for self-drafting speculative decoding (Kangaroo and peers)."""

__version__ = "0.1.0"
