"""Reports: the support-matrix HTML page (``matrix_page``); more pages join here later."""

from __future__ import annotations


def build_matrix_page(matrix, checks=None, model_name=None) -> str:
    from .matrix_page import build_matrix_page as build

    return build(matrix, checks, model_name)
