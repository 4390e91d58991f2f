"""Trailing unsupported ops become generated post-processing (Python and C++).

    from converter.postproc import find_cut, split
    cut = find_cut(model, {"softmax_0"})          # where to cut, or why not (cut.ok, cut.reason)
    result = split(model, {"softmax_0"}, max_outputs=1, out_dir="out/postproc")
    result.model                                   # the cut model (boundary tensors as outputs)
    result.files                                   # postprocess.py, postprocess.hpp, manifest.json
"""

from .cut import Cut, find_cut
from .program import SUPPORTED_OPS
from .split import SplitResult, split

__all__ = ["Cut", "SplitResult", "SUPPORTED_OPS", "find_cut", "split"]
