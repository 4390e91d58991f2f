"""TNN layer type strings and their ``LayerType`` enum values.

Values from Tencent/TNN ``source/tnn/core/layer_type.h``; type strings from the string map in
``source/tnn/core/layer_type.cc`` (``GlobalConvertLayerType``).  Only the layers edgeconv writes or
reads are listed.  ``HAS_INTERPRETER`` marks the types registered in
``source/tnn/interpreter/tnn/layer_interpreter/*.cc``: only those may carry parameters in the
.tnnproto or a resource block in the .tnnmodel (model_interpreter.cc:444-450 fails with
"layer_interpreter is nil" otherwise).
"""

from __future__ import annotations

#: type string -> LayerType enum value (layer_type.h), aliases included (layer_type.cc).
LAYER_TYPE = {
    "Convolution": 1,
    "BatchNormCxx": 2,
    "BatchNormalization": 2,
    "Pooling": 4,
    "ReLU": 5,
    "Relu": 5,
    "Concat": 8,
    "Reshape": 9,
    "Flatten": 10,
    "InnerProduct": 19,
    "Softmax": 21,
    "SoftmaxCaffe": 21,
    "Deconvolution": 22,
    "Sigmoid": 23,
    "Permute": 32,
    "PReLU": 35,
    "Add": 38,
    "Tanh": 39,
    "Abs": 41,
    "Mul": 42,
    "InstBatchNormCxx": 43,
    "Pad": 44,
    "Power": 69,
    "Neg": 70,
    "Gather": 104,
    "MatMul": 105,
    "Sub": 108,
    "Squeeze": 118,
    "ReLU6": 125,
    "Relu6": 125,
    "Sqrt": 130,
    "Elu": 132,
    "ReduceSum": 133,
    "Maximum": 137,
    "Minimum": 140,
    "Exp": 141,
    "Tile": 148,
    "Repeat": 148,
    "Upsample": 149,
    "SplitV": 153,
    "Unsqueeze": 164,
    "ReduceMean": 169,
    "Clip": 171,
    "HardSigmoid": 172,
    "HardSwish": 173,
    "Softplus": 174,
    "Div": 175,
    "Sign": 176,
    "ReduceMax": 177,
    "Cos": 178,
    "Acos": 179,
    "Sin": 180,
    "Asin": 181,
    "Tan": 182,
    "Atan": 183,
    "Log": 184,
    "Reciprocal": 185,
    "Floor": 186,
    "Selu": 187,
    "ReduceL1": 188,
    "ReduceL2": 189,
    "ReduceLogSum": 190,
    "ReduceLogSumExp": 191,
    "ReduceMin": 192,
    "ReduceProd": 193,
    "ReduceSumSquare": 194,
    "Ceil": 195,
    "ArgMaxOrMin": 199,
    "Expand": 304,
    "StridedSliceV2": 306,
    "Erf": 307,
    "PadV2": 316,
    "Softsign": 320,
    "LayerNorm": 326,
    "LogSoftmax": 330,
    # Layers added for the op-support matrix (layers_extra.py / reader_extra.py).
    "LRN": 12,
    "Shape": 72,
    "Cast": 103,
    "Reorg": 131,
    "ScatterND": 305,
    "ConstantOfShape": 308,
    "NonZero": 309,
    "Range": 311,
    "Size": 312,
    "BitShift": 313,
    "GatherND": 315,
    "RoiAlign": 317,
    "Einsum": 321,
    "GridSample": 323,
    "Equal": 324,
    "Where": 325,
    # int8 layers (the "Quantized" prefix marks a layer int8, model_interpreter.cc) and the blob
    # scale resource (LAYER_BLOB_SCALE, layer_type.h; model_packer.cc FindLayerInfo "BlobScale").
    "QuantizedConvolution": 1,
    "QuantizedInnerProduct": 19,
    "QuantizedAdd": 38,
    "QuantizedConcat": 8,
    "QuantizedReLU": 5,
    "QuantizedPooling": 4,
    "BlobScale": 600,
}

#: LayerType values that have a layer interpreter (REGISTER_*_LAYER_INTERPRETER).
HAS_INTERPRETER = frozenset(
    {1, 2, 4, 8, 9, 10, 19, 21, 22, 23, 32, 35, 38, 42, 43, 44, 69, 70, 104, 105, 108, 118, 132, 133,
     137, 140, 149, 153, 164, 169, 171, 172, 173, 174, 175, 177, 178, 179, 180, 181, 182, 183, 184,
     185, 186, 187, 188, 189, 190, 191, 192, 193, 194, 195, 148, 199, 304, 306, 307, 316, 320, 326, 330,
     # lrn, shape, cast, reorg, scatter_nd, constantofshape, range, size, bitshift, gathernd, roialign,
     # einsum, gridsample _layer_interpreter.cc.  Equal (324), Where (325) and NonZero (309) have none.
     12, 72, 103, 131, 305, 308, 311, 312, 313, 315, 317, 321, 323,
     600}  # blob_scale_layer_interpreter.cc
)

#: DataType enum (include/tnn/core/common.h:34-48).
DATA_FLOAT, DATA_HALF, DATA_INT8, DATA_INT32, DATA_BFP16, DATA_INT64, DATA_UINT32 = range(7)

#: 0xFABC0004, ``g_version_magic_number_v2`` (objseri.h:29-30); 0xFABC0002 is the old format.
MAGIC_V2 = 0xFABC0004
MAGIC_V1 = 0xFABC0002
