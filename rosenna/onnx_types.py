"""ONNX tensor element types as numpy dtypes."""

import numpy as np
from onnx import helper


def numpy_dtype(elem_type):
    """The numpy dtype of an ONNX ``TensorProto`` element type code."""
    return np.dtype(helper.tensor_dtype_to_np_dtype(int(elem_type)))
