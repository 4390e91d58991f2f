"""edgeconv: take a trained model to an edge framework that can run it."""

__version__ = "0.1.0"
