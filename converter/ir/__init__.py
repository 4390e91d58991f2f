"""The one graph API (onnx-graphsurgeon, ``graph``), big weights held once (``weights``),
shape inference without serializing them (``light_model``), memory estimates (``memory``)
and the convolution arithmetic shared by the numpy executors (``conv_math``).
"""
