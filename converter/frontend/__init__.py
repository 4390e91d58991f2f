"""Stage 1, reading: every input kind to ONNX, then to edgeconv's canonical ONNX.

``load`` picks by file kind (``.pt2``, ``.onnx`` of any opset, TorchScript, TF/Keras/TFLite),
``pickle_guard`` refuses unsafe pickles before anything unpickles, ``normalize`` brings the
graph to the canonical opset with fixed shapes and folded constants.
"""
