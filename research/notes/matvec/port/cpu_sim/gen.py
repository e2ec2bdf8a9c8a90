# gen.py KERNELS_DIR OUT.cpp — builds one C++ translation unit that runs kernels/matvec.cu's
# one-token bodies (matvec_body, matvec_wr_body) on the CPU: the real sources, with the few
# functions written in inline PTX replaced by C++ equivalents (shim.h) and the shared-memory
# declarations pointed at the simulator's buffers.
import re, sys
kd, out = sys.argv[1], sys.argv[2]

def drop_fn(text, name):
    m = re.search(r"__device__ __forceinline__ [\w ]+?\b" + name + r"\(", text)
    assert m, name
    i = text.index("{", m.end())
    depth = 0
    for j in range(i, len(text)):
        if text[j] == "{": depth += 1
        elif text[j] == "}":
            depth -= 1
            if depth == 0:
                return text[:m.start()] + "/* " + name + ": shim.h */" + text[j + 1:]
    raise SystemExit("unbalanced " + name)

def body(path):
    t = open(path).read()
    t = "\n".join(l for l in t.splitlines() if not l.startswith("#include") and l.strip() != "#pragma once")
    return t

common = body(kd + "/common/common.cuh")
for f in ["f16_to_f32", "f32_to_f16"]:
    common = drop_fn(common, f)
formats = body(kd + "/common/formats.cuh")
for f in ["mag_byte", "mag_byte_r", "mag_word", "pf_l2"]:
    formats = drop_fn(formats, f)
mv = body(kd + "/matvec.cu")
for old, new in [
    ("extern __shared__ float xs_sh[];", "float* xs_sh = (float*)sim::smem;"),
    ("extern __shared__ uint4 mv_wr_sh[];", "uint4* mv_wr_sh = (uint4*)sim::smem;"),
    ("__shared__ double red[MV_WARPS];", "static double red[MV_WARPS];"),
]:
    n = mv.count(old)
    assert n >= 1, old
    mv = mv.replace(old, new)
assert "__shared__" not in mv.replace("__shared__ memory", ""), [l for l in mv.splitlines() if "__shared__" in l]
open(out, "w").write(
    '#include "shim_pre.h"\n' + common + '\n#include "shim_post.h"\n' + formats + "\n" + mv + "\n"
)
