"""The weights of the implicit-GEMM convs (:mod:`rosenna.emit.cuda.conv_igemm`) as the kernel reads
them: the order of the GEMM's K (:func:`k_order`) and the 3xTF32 B fragments, packed in numpy when
the file is generated (:func:`packed`, embedded weights) or in C++ by ``<name>_device_upload``
(:func:`host_packing`, file-loaded ones); tests/test_conv_igemm.py compares the two bit for bit."""

import numpy as np

from rosenna.emit.cuda import tf32


def k_order(shape):
    """For each column k of the GEMM's K (padded to KT * 8): ``(channel, tap)``, or None for a
    padding column. Tap-major, channels padded to CP: k = tap * CP + c."""
    out = []
    for k in range(shape.kt * 8):
        tap, c = divmod(k, shape.cp)
        out.append((c, tap) if c < shape.c and tap < shape.kh * shape.kw else None)
    return out


def weight_index(plan, conv):
    """The conv's W among the plan's weights (its index in the weights file)."""
    ident = plan.storage[conv.window["w"]][1]
    return next(i for i, wt in enumerate(plan.weights) if wt.ident == ident)


def packed(plan, conv):
    """The B fragments of the conv's weights (W [COUT][C][KH][KW]) in K's order, split into
    TF32 big and small parts: :func:`rosenna.emit.cuda.tf32.pack_layer`'s layout, KT x NS x 32
    lanes x 4 floats."""
    s = conv.shape
    w = plan.weights[weight_index(plan, conv)].array.astype(np.float32).reshape(s.cout, s.c, s.kh * s.kw)
    w2d = np.zeros((s.cout, s.kt * 8), np.float32)
    for k, where in enumerate(k_order(s)):
        if where is not None:
            w2d[:, k] = w[:, where[0], where[1]]
    return tf32.pack_layer(w2d, s.kt * 8, s.ns * 8, paired=False)


def host_packing(plan, conv, dest="b"):
    """C++ filling ``dest`` (KT x NS x 32 x 4 floats, zeroed) from ``host[i]``, the conv's W in the
    weights file: the packing :func:`packed` does in numpy."""
    s = conv.shape
    return f"""    for (int kt = 0; kt < {s.kt}; ++kt)
        for (int nt = 0; nt < {s.ns}; ++nt)
            for (int lane = 0; lane < 32; ++lane) {{
                const int c = nt * 8 + lane / 4;
                float v[2];
                for (int h = 0; h < 2; ++h) {{  /* b0 at k = kt * 8 + tig, b1 at k + 4; k = tap * {s.cp} + channel */
                    const int k = kt * 8 + lane % 4 + 4 * h, tap = k / {s.cp}, ci = k % {s.cp};
                    v[h] = c < {s.cout} && ci < {s.c} && tap < {s.kh * s.kw} ? host[{weight_index(plan, conv)}][(c * {s.c} + ci) * {s.kh * s.kw} + tap] : 0.0f;
                }}
                float *f = {dest} + 4 * ((kt * {s.ns} + nt) * 32 + lane);
                f[0] = rosenna_host_tf32(v[0]);
                f[1] = rosenna_host_tf32(v[1]);
                f[2] = rosenna_host_tf32(v[0] - f[0]);
                f[3] = rosenna_host_tf32(v[1] - f[1]);
            }}"""
