"""The op registry: every ONNX op rosenna knows, each defined once in one module.

Owns each op's attributes, shape rule, reference formula and lowering into the loop IR.

Adding an op is one module (or one class in its family's module) and one line in ``_OPS``.
"""

from rosenna.ops import (activation, constant, conv, elementwise, gemm, indexing, layout, matmul, normalization,
                         pad, pool, recurrent, reduce, resize, softmax)
from rosenna.ops import dft, gather_scatter, ml_linear, ml_preprocess, ml_trees
from rosenna.ops import axis, gridsample, integer, loss, mathfn, matrix, quantize, scan, space

_OPS = (
    gemm.Gemm,
    matmul.MatMul,
    matmul.Einsum,
    elementwise.Add,
    elementwise.Sub,
    elementwise.Mul,
    elementwise.Div,
    elementwise.Sum,
    elementwise.Max,
    elementwise.Min,
    elementwise.PRelu,
    elementwise.Pow,
    elementwise.Less,
    elementwise.LessOrEqual,
    elementwise.Greater,
    elementwise.GreaterOrEqual,
    elementwise.Equal,
    elementwise.Not,
    elementwise.And,
    elementwise.Or,
    elementwise.Where,
    activation.Relu,
    activation.Tanh,
    activation.Sigmoid,
    activation.LeakyRelu,
    activation.Elu,
    activation.Selu,
    activation.HardSigmoid,
    activation.Softplus,
    activation.Softsign,
    activation.Exp,
    activation.Log,
    activation.Sqrt,
    activation.Erf,
    activation.Gelu,
    activation.Neg,
    activation.Clip,
    activation.Abs,
    activation.Sin,
    activation.Cos,
    activation.Floor,
    activation.Ceil,
    activation.Reciprocal,
    activation.Sign,
    activation.Mish,
    activation.HardSwish,
    activation.Swish,
    conv.Conv,
    conv.ConvTranspose,
    pool.MaxPool,
    pool.AveragePool,
    pool.GlobalAveragePool,
    pool.GlobalMaxPool,
    pad.Pad,
    softmax.Softmax,
    softmax.LogSoftmax,
    normalization.BatchNormalization,
    normalization.LayerNormalization,
    normalization.GroupNormalization,
    normalization.InstanceNormalization,
    recurrent.LSTM,
    recurrent.GRU,
    indexing.Split,
    resize.Resize,
    resize.Upsample,
    reduce.ReduceMean,
    reduce.ReduceSum,
    reduce.ReduceMax,
    reduce.ReduceMin,
    layout.Identity,
    layout.Dropout,
    layout.Flatten,
    layout.Reshape,
    layout.Squeeze,
    layout.Unsqueeze,
    layout.Transpose,
    layout.Cast,
    layout.CastLike,
    constant.Constant,
    constant.Shape,
    constant.Size,
    constant.ConstantOfShape,
    constant.Range,
    constant.Expand,
    indexing.Gather,
    indexing.Concat,
    indexing.Slice,
    indexing.Tile,
    gather_scatter.GatherElements,
    gather_scatter.GatherND,
    gather_scatter.ScatterElements,
    gather_scatter.ScatterND,
    dft.DFT,
    ml_preprocess.Scaler,
    ml_preprocess.Normalizer,
    ml_preprocess.Imputer,
    ml_preprocess.Binarizer,
    ml_preprocess.FeatureVectorizer,
    ml_preprocess.ArrayFeatureExtractor,
    ml_preprocess.LabelEncoder,
    ml_linear.LinearRegressor,
    ml_linear.LinearClassifier,
    ml_linear.SVMRegressor,
    ml_trees.TreeEnsembleRegressor,
    ml_trees.TreeEnsembleClassifier,
    ml_trees.TreeEnsemble,
    reduce.ReduceProd,
    reduce.ReduceL1,
    reduce.ReduceL2,
    reduce.ReduceSumSquare,
    reduce.ReduceLogSum,
    reduce.ReduceLogSumExp,
    reduce.ArgMax,
    reduce.ArgMin,
    scan.CumSum,
    scan.CumProd,
    integer.Mod,
    integer.BitShift,
    integer.BitwiseAnd,
    integer.BitwiseOr,
    integer.BitwiseXor,
    integer.BitwiseNot,
    elementwise.Xor,
    elementwise.Mean,
    mathfn.Celu,
    mathfn.ThresholdedRelu,
    mathfn.Shrink,
    mathfn.IsNaN,
    mathfn.IsInf,
    mathfn.Round,
    mathfn.Tan,
    mathfn.Asin,
    mathfn.Acos,
    mathfn.Atan,
    mathfn.Sinh,
    mathfn.Cosh,
    mathfn.Asinh,
    mathfn.Acosh,
    mathfn.Atanh,
    axis.Hardmax,
    axis.LpNormalization,
    axis.TopK,
    matrix.Trilu,
    matrix.Det,
    matrix.EyeLike,
    pool.LpPool,
    quantize.QuantizeLinear,
    quantize.DequantizeLinear,
    gridsample.GridSample,
    space.DepthToSpace,
    space.SpaceToDepth,
    recurrent.RNN,
    loss.NegativeLogLikelihoodLoss,
    gridsample.AffineGrid,
    axis.LRN,
    axis.OneHot,
    axis.Compress,
    space.CenterCropPad,
    axis.ReverseSequence,
    space.Col2Im,
    gather_scatter.Scatter,
    gather_scatter.TensorScatter,
    pool.MaxUnpool,
    dft.STFT,
    gridsample.RoiAlign,
    gridsample.DeformConv,
)

REGISTRY = {cls.name: cls() for cls in _OPS}


def get(op_type):
    """The :class:`~rosenna.ops.base.Op` for ``op_type``, or ``None``."""
    return REGISTRY.get(op_type)


#: The ONNX domains whose ops rosenna lowers ("" and "ai.onnx" are the standard one).
DOMAINS = ("", "ai.onnx", ml_preprocess.ML_DOMAIN)


def find(node):
    """The :class:`~rosenna.ops.base.Op` for a graph node, by its domain and type, or ``None``."""
    op = REGISTRY.get(node.op)
    domain = "" if node.domain == "ai.onnx" else node.domain
    return op if op is not None and op.domain == domain else None


def lowered_ops():
    """Names of the ops that generate code or aliases (what the README's op list shows)."""
    return sorted(name for name, op in REGISTRY.items() if op.lowerable or isinstance(op, layout.Alias)
                  or name == "Transpose")


def folded_ops():
    """Names of the ops that rosenna only removes by constant folding."""
    return sorted(set(REGISTRY) - set(lowered_ops()))


def activation_expr(activation, x):
    """Apply a fused activation ``(op_name, attrs)`` to the kernel expression ``x``."""
    if activation is None:
        return x
    name, attrs = activation
    return REGISTRY[name].expr(attrs, x)
