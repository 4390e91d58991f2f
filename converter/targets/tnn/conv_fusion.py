"""TNN's runtime fuses an activation into the convolution just before it: a layer order for which
every such fusion computes what the file says.

When a network is created, before any blob gets memory, TNN runs its net optimizers
(Tencent/TNN@f0cb08129a05c5b60f08e4ef66042a54a883a56a:source/tnn/core/default_network.cc#L104-L114).
``NetOptimizerFuseConvPost`` (source/tnn/optimizer/net_optimizer_fuse_conv_post.cc) runs on ARM,
NAIVE, Metal, OpenCL (ReLU, ReLU6, Sigmoid followed by a Mul, Swish) and X86 (ReLU, ReLU6), #L37-L56.
It walks the layers *in file order* and looks only at neighbours (#L73-L80): a layer with a
``ConvLayerParam`` (Convolution, Deconvolution, Convolution1D/3D) directly followed by one of those
activations is fused, the convolution taking the activation's outputs and the activation layer
dropped (#L128-L130), when

* the convolution has no activation yet (#L118), and
* no layer *after* the activation reads the convolution's output (#L101-L115).

It never checks that the activation reads the convolution's output, nor that the convolution's
output (or, for Sigmoid + Mul, #L84-L96, the Sigmoid's output) is a net output or read elsewhere;
and a Sigmoid + Mul it matches but declines to fuse (the convolution's output read later) loses
the Sigmoid: #L92-L93 made the Mul the current layer, and #L132-L133 keeps only that.
A dropped blob keeps no producer, so ``BlobManager::AllocateBlobMemory`` gives it no memory
(source/tnn/core/blob_manager.cc#L181-L206) while the net still lists it as an output (#L140-L145):
its handle stays NULL, and copying it out crashes (``BlobConverter::ConvertToMat`` reads address 0).
That is what fasterrcnn_rpn's FPN heads hit: ``Convolution -> output_4`` directly followed by a
``ReLU`` of another pyramid level; the ReLU was fused into the wrong convolution and output_4 was
never written.  On NAIVE/ARM a Sigmoid of another tensor is fused the same way and gives wrong
numbers without any crash.

:func:`keep_fusions_exact` rearranges a written network so that every fusion TNN makes is the
exact one, on every device (the union of the activation sets): an activation that does not read the
convolution before it moves in front of it (independent layers, so only the order changes); a
convolution whose output must survive gets its output copied (``Mul`` by 1.0, exact) so a later
layer reads it; a Sigmoid + Mul whose blobs must survive has the Mul's (equal-shape, commutative)
operands swapped so the pattern does not match.  :func:`fusions` is the optimizer's decision
itself, which the runtime adapter also uses to know which blobs TNN fuses away.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ...ir.graph import unique_name
from .layer_types import LAYER_TYPE
from .net import RawBuffer, TnnLayer, TnnNet

#: LayerTypes whose interpreter makes a ConvLayerParam (conv_layer_interpreter.cc#L150-L151,
#: conv_1d_layer_interpreter.cc#L108, conv_3d_layer_interpreter.cc#L123; layer_type.h values).
CONV_PARAM_TYPES = frozenset({1, 22, 201, 203})
#: net_optimizer_fuse_conv_post.cc#L40-L52 over all devices: ReLU, ReLU6, Sigmoid, Swish.
RELU, RELU6, SIGMOID, SWISH, MUL = 5, 125, 23, 401, 42
FUSED_ACTIVATIONS = frozenset({RELU, RELU6, SIGMOID, SWISH})
#: A quantized convolution fuses ReLU and ReLU6 only (#L119-L126).
QUANTIZED_ACTIVATIONS = frozenset({RELU, RELU6})
#: ConvLayerParam.activation_type is the 14th field (conv_layer_interpreter.cc#L29-L52).
ACTIVATION_FIELD = 13


@dataclass(frozen=True)
class LayerView:
    """What the optimizer reads of one layer."""

    type: int
    quantized: bool
    inputs: tuple[str, ...]
    outputs: tuple[str, ...]
    activation: int = 0  # a ConvLayerParam's activation_type


@dataclass(frozen=True)
class Fusion:
    """A convolution and the layers after it the optimizer takes: ``fused`` (the convolution
    swallows them), or, for a Sigmoid + Mul it declines, the Sigmoid dropped and the Mul kept
    (#L84-L96 moved ``layer_info_current`` to the Mul; #L132-L133 then keeps only that)."""

    conv: int  # index of the convolution in the layer list
    absorbed: tuple[int, ...]  # the activation (and, for Sigmoid, the Mul)
    fused: bool = True


def view(layer_type: str, inputs, outputs, params) -> LayerView:
    """A layer as ``type_str`` and parameter tokens (written or parsed)."""
    type_ = LAYER_TYPE.get(layer_type, -1)
    activation = 0
    if type_ in (1, 22) and len(params) > ACTIVATION_FIELD:
        activation = int(params[ACTIVATION_FIELD])
    return LayerView(type_, layer_type.startswith("Quantized"), tuple(inputs), tuple(outputs), activation)


def _fusion_at(layers: list[LayerView], index: int) -> Fusion | None:
    """NetOptimizerFuseConvPost::Optimize on the pair (index - 1, index), #L73-L140."""
    prev, cur = layers[index - 1], layers[index]
    if prev.type not in CONV_PARAM_TYPES or cur.type not in FUSED_ACTIVATIONS:
        return None
    conv_out, absorbed = prev.outputs[0], (index,)
    if cur.type == SIGMOID:
        after = layers[index + 1] if index + 1 < len(layers) else None
        if after is None or after.type != MUL or after.inputs != (conv_out, cur.outputs[0]):
            return None
        absorbed = (index, index + 1)
    read_later = any(conv_out in later.inputs for later in layers[absorbed[-1] + 1:])
    fused = (not read_later and prev.activation == 0
             and not (prev.quantized and cur.type not in QUANTIZED_ACTIVATIONS))
    if not fused and cur.type != SIGMOID:
        return None  # the activation stays a layer of its own
    return Fusion(index - 1, absorbed, fused)


def fusions(layers: list[LayerView]) -> list[Fusion]:
    """What TNN's runtime does to ``layers`` (in file order) on its widest device set."""
    found, index = [], 1
    while index < len(layers):
        fusion = _fusion_at(layers, index)
        if fusion is not None:
            found.append(fusion)
            index = fusion.absorbed[-1]
        index += 1
    return found


def dropped_blobs(layers: list[LayerView]) -> set[str]:
    """Blobs no layer writes after TNN's optimizer: a fused convolution's own output, and every
    Sigmoid output it takes (fused or dropped)."""
    gone = set()
    for fusion in fusions(layers):
        if fusion.fused:
            gone.add(layers[fusion.conv].outputs[0])
        gone.update(layers[i].outputs[0] for i in fusion.absorbed[:-1] if layers[i].type == SIGMOID)
    return gone


def _problem(layers: list[LayerView], fusion: Fusion, outputs: set[str]) -> str:
    """Why TNN would compute something else than the file says ("" when the fusion is exact)."""
    conv_out = layers[fusion.conv].outputs[0]
    activation = layers[fusion.absorbed[0]]
    if activation.inputs != (conv_out,):
        return "foreign"
    if activation.type == SIGMOID:
        sigmoid_out = activation.outputs[0]
        readers = sum(sigmoid_out in layer.inputs for layer in layers)
        exact = fusion.fused and conv_out not in outputs and sigmoid_out not in outputs and readers == 1
        return "" if exact else "sigmoid"
    return "output" if conv_out in outputs else ""


def keep_fusions_exact(net: TnnNet) -> None:
    """Rearrange ``net`` in place until every fusion TNN makes is exact (module docstring)."""
    outputs = set(net.outputs)
    for _ in range(len(net.layers) ** 2 + 1):
        layers = [view(layer.type, layer.inputs, layer.outputs, layer.params) for layer in net.layers]
        bad = next(((f, why) for f in fusions(layers) if (why := _problem(layers, f, outputs))), None)
        if bad is None:
            return
        fusion, why = bad
        if why == "foreign":  # the activation reads an earlier blob: it may run first
            i = fusion.conv
            net.layers[i], net.layers[i + 1] = net.layers[i + 1], net.layers[i]
        elif why == "sigmoid":  # Mul(conv, sigmoid) -> Mul(sigmoid, conv): same shapes, same product
            net.layers[fusion.absorbed[1]].inputs.reverse()
        else:
            _copy_output(net, fusion.conv)
    # unreachable: a swap moves an activation earlier, a copy or an operand swap ends a fusion
    raise AssertionError("TNN conv fusion guard did not settle")


def _copy_output(net: TnnNet, index: int) -> None:
    """The convolution writes a new blob; ``Mul`` by 1.0 copies it to the original one, and reading
    it keeps TNN from fusing (#L101-L115)."""
    conv = net.layers[index]
    blobs, names = set(net.blobs()), {layer.name for layer in net.layers}
    out = conv.outputs[0]
    written = unique_name(f"{out}__conv", blobs)
    conv.outputs[0] = written
    if out in net.blob_scales:
        net.blob_scales[written] = net.blob_scales[out]
    one = RawBuffer.of(np.array([1.0], np.float32))
    net.layers.insert(index + 1, TnnLayer("Mul", unique_name(f"{conv.name}__copy", names), [written], [out], [1],
                                          [("raw", one)]))

