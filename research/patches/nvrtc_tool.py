# Shared by the research ptxas / PTX scripts under research/patches (no GPU; the NVRTC 13.0
# wheel that tools/nvrtc-check installs): a kernels/ file with its "..." includes expanded as
# the engine does, compiled with given options; the compile log, or the PTX.
import ctypes, os, re

LIB = ctypes.CDLL(os.path.expanduser("~/.cache/assay/cuda-nvrtc-13.0.88/nvidia/cu13/lib/libnvrtc.so.13"))


def expand(kdir, name, seen=None):
    seen = [] if seen is None else seen
    out = []
    for line in open(os.path.join(kdir, name)).read().splitlines():
        t = line.strip()
        if t == "#pragma once":
            continue
        if t.startswith("#include") and t[8:].strip().startswith('"'):
            inc = t[8:].strip().strip('"')
            if inc not in seen:
                seen.append(inc)
                out.append(expand(kdir, inc, seen))
            continue
        out.append(line)
    return "\n".join(out)


def compile(kdir, name, opts, want_ptx=False):
    """(rc, log) of NVRTC on kdir/name with opts (str list); with want_ptx, (rc, ptx text)."""
    src = expand(kdir, name).encode()
    prog = ctypes.c_void_p()
    assert LIB.nvrtcCreateProgram(ctypes.byref(prog), src, name.encode(), 0, None, None) == 0
    arr = (ctypes.c_char_p * len(opts))(*[o.encode() for o in opts])
    r = LIB.nvrtcCompileProgram(prog, len(opts), arr)
    n = ctypes.c_size_t()
    if want_ptx and r == 0:
        LIB.nvrtcGetPTXSize(prog, ctypes.byref(n))
        buf = ctypes.create_string_buffer(n.value)
        LIB.nvrtcGetPTX(prog, buf)
    else:
        LIB.nvrtcGetProgramLogSize(prog, ctypes.byref(n))
        buf = ctypes.create_string_buffer(n.value)
        LIB.nvrtcGetProgramLog(prog, buf)
    return r, buf.value.decode()


def ptxas_info(log):
    """{entry: [ptxas info lines about registers / spills / stack]} from a --ptxas-options=-v log."""
    cur, rows = None, {}
    for line in log.splitlines():
        m = re.search(r"(?:Compiling entry function|Function properties for) '?(\w+)'?", line)
        if m:
            cur = m.group(1)
            continue
        if cur:
            info = line.split("info    :")[-1].strip()
            if "registers" in info or "spill" in info or "stack" in info:
                rows.setdefault(cur, []).append(info)
    return rows
