"""Remedy (4), custom layers: the pipeline's entry point (the implementation is ``converter.custom``)."""

from __future__ import annotations

from ...custom import CUSTOM_NODES_KEY, custom_nodes_of, write_custom_layers

__all__ = ["CUSTOM_NODES_KEY", "custom_nodes_of", "write_custom_layers"]
