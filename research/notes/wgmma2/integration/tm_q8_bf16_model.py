#!/usr/bin/env python3
"""CPU model of kernels/gemmt.cu section 4's register-A operands for Q8_0 and BF16 (and Q4_0,
the GPU-verified control), against section 3's shared-memory tile and the scratch decode.

No GPU, no numpy: f16 arithmetic through struct's 'e' (IEEE binary16, round to nearest even),
`prmt` / `sub.rn.f16x2` / `mul.rn.f16x2` / `cvt.rn.f16x2.f32` emulated bit for bit.

What it checks, for random planar Q8_0 / Q4_0 matrices and BF16 matrices (values within f16's
range, some subnormal in f16), random stage indices, ring slots and tile rows:

1. Section 4's data path: the producer's TMA boxes (weights: the 64-row halves, quants box
   QROW bytes x 64 rows, Q8_0 in the 64-byte swizzle, BF16 in the 128-byte swizzle; scales box
   8 x 64 u16 at (kt / 4) * 8) written into a byte model of shared memory at the stage's
   address, the hardware swizzle applied to the absolute address (16-byte chunk bits 4..6 XOR
   address bits 7..9 for 128 bytes, bits 4..5 XOR bits 7..8 for 64 bytes); then every consumer
   thread's loads exactly as the kernel computes its addresses (`ks ^ (g >> 1)`, `(2 ks) ^ g`,
   `4 (t >> 1)`, `psel`, the scale word at `SOFF + 4 (kt & 3) + row * 16`, `dd` by prmt) and
   its decode (gtm_q8pair / gtm_q4pair / gt_bf2h), giving a0..a3 per thread and k16 step.
2. The register-A fragment semantics (warp v of consumer c holds tile rows 64 c + 16 v ..; a0
   row g k 2t, 2t + 1; a1 row g + 8; a2 row g k 2t + 8, 2t + 9; a3 row g + 8 k 2t + 8, 2t + 9;
   low half the even k) turn them into a [128 rows][64 k] f16 tile per stage.
3. Section 3's tile for the same stage: its `fetch` / `put` (block loads, gt_dq8 with the Q8_0
   operands ^ 0x80808080 and 0x64806480, gt_bf2h) into a byte model of its swizzled
   shared-memory tile (gw_sw), read back as logical [row][k] values (what its descriptors feed).
4. The scratch decode's values (gemmt_dq_*: d * q in f32 rounded once to f16; BF16 rounded
   to f16).

All three tiles must be equal bit for bit. Run: python3 tm_q8_bf16_model.py [seed] [trials]
"""

import random
import struct
import sys


# ---------------------------------------------------------------- f16 / bit helpers
def h2f(b):
    return struct.unpack("<e", struct.pack("<H", b & 0xFFFF))[0]


def f2h(x):
    return struct.unpack("<H", struct.pack("<e", x))[0]


def f32_bits_to_float(b):
    return struct.unpack("<f", struct.pack("<I", b & 0xFFFFFFFF))[0]


def prmt(a, b, sel):
    """prmt.b32 (default mode): byte i of the result is byte sel[i] (0..7) of {b, a}."""
    src = [(a >> (8 * i)) & 0xFF for i in range(4)] + [(b >> (8 * i)) & 0xFF for i in range(4)]
    r = 0
    for i in range(4):
        s = (sel >> (4 * i)) & 0xF
        v = src[s & 7]
        if s & 8:
            v = 0xFF if v & 0x80 else 0
        r |= v << (8 * i)
    return r


def lanes(w):
    return w & 0xFFFF, (w >> 16) & 0xFFFF


def hsub2(a, b):
    (a0, a1), (b0, b1) = lanes(a), lanes(b)
    return f2h(h2f(a0) - h2f(b0)) | (f2h(h2f(a1) - h2f(b1)) << 16)


def hmul2(a, b):
    (a0, a1), (b0, b1) = lanes(a), lanes(b)
    # The product of two f16 is exact in a double; one rounding to f16 (mul.rn.f16x2).
    return f2h(h2f(a0) * h2f(b0)) | (f2h(h2f(a1) * h2f(b1)) << 16)


def gm_pair(w, sel, off):  # kernels/common/mma.cuh
    return hsub2(prmt(w, 0x64, sel), off)


def gt_dq8(w0, w1, off, dd):  # kernels/gemmt.cu section 1
    return [hmul2(gm_pair(w0, 0x4140, off), dd), hmul2(gm_pair(w0, 0x4342, off), dd),
            hmul2(gm_pair(w1, 0x4140, off), dd), hmul2(gm_pair(w1, 0x4342, off), dd)]


def gt_bf2h(w):  # cvt.rn.f16x2.f32 of the two bf16 (as f32), low value in the low half
    lo = f2h(f32_bits_to_float((w << 16) & 0xFFFFFFFF))
    hi = f2h(f32_bits_to_float(w & 0xFFFF0000))
    return lo | (hi << 16)


def gtm_q4pair(w, sel, dd):
    return hmul2(gm_pair(w, sel, 0x64086408), dd)


def gtm_q8pair(w, sel, dd):
    return hmul2(gm_pair(w, sel, 0x64806480), dd)


def u32(mem, a):
    return mem[a] | (mem[a + 1] << 8) | (mem[a + 2] << 16) | (mem[a + 3] << 24)


def swz(addr, span):
    """The TMA / wgmma swizzle of a shared-memory byte address (span 0, 64 or 128 bytes)."""
    if span == 128:
        return addr ^ (((addr >> 7) & 7) << 4)
    if span == 64:
        return addr ^ (((addr >> 7) & 3) << 4)
    return addr


# ---------------------------------------------------------------- matrices
WF_Q4, WF_Q8, WF_BF16 = 1, 2, 3


def make_matrix(rng, wf, rows, k):
    """Device bytes of a matrix: planar quants then scales (Q4_0 / Q8_0), or row-major bf16."""
    nb = k // 32
    if wf == WF_BF16:
        out = bytearray()
        for _ in range(rows * k):
            r = rng.random()
            if r < 0.05:
                v = rng.uniform(-1e-6, 1e-6)  # f16 subnormal range: rounds in the conversion
            elif r < 0.1:
                v = rng.uniform(-60000.0, 60000.0)  # near f16's top (still finite)
            else:
                v = rng.uniform(-1.0, 1.0)
            b = struct.unpack("<I", struct.pack("<f", v))[0] >> 16  # truncate to bf16
            if rng.random() < 0.3:
                b = rng.getrandbits(16)  # any bit pattern whose f16 rounding stays finite
                e = (b >> 7) & 0xFF
                if e >= 0x8E:  # |v| >= 2^15 (or inf / NaN): an exponent within f16's range
                    b = (b & 0x807F) | (0x70 << 7)
            out += struct.pack("<H", b)
        return bytes(out)
    qb = 16 if wf == WF_Q4 else 32
    quants = bytes(rng.getrandbits(8) for _ in range(rows * nb * qb))
    scales = bytearray()
    for _ in range(rows * nb):
        mag = rng.uniform(0.0001, 0.1) if rng.random() < 0.9 else rng.uniform(1.0, 200.0)
        scales += struct.pack("<H", f2h(mag if rng.random() < 0.5 else -mag))
    return quants + bytes(scales)


def scratch_value(wf, m, rows, k, row, j):
    """gemmt_dq_*'s f16 bits of value j of row `row` (the reference of every tile)."""
    nb = k // 32
    if wf == WF_BF16:
        b = m[2 * (row * k + j)] | (m[2 * (row * k + j) + 1] << 8)
        return f2h(f32_bits_to_float(b << 16))
    qb = 16 if wf == WF_Q4 else 32
    blk, p = divmod(j, 32)
    base = (row * nb + blk) * qb
    sb = rows * nb * qb + (row * nb + blk) * 2
    d = h2f(m[sb] | (m[sb + 1] << 8))
    if wf == WF_Q4:
        byte = m[base + (p % 16)]
        q = (byte & 0xF if p < 16 else byte >> 4) - 8
    else:
        q = m[base + p]
        q = q - 256 if q >= 128 else q
    return f2h(float(d) * q)  # d * q exact in a double (and in f32), rounded once


# ---------------------------------------------------------------- section 3's tile
def section3_tile(wf, m, rows, k, kt, r0):
    """Section 3's put() of stage kt for tile rows r0.. (128 rows): logical [r][64] f16."""
    nb = k // 32
    smem = bytearray(128 * 128)
    for r in range(128):
        row = r0 + r
        for b in range(2):
            blk = kt * 2 + b
            raw = [0] * 16  # raw[i][c] words: 4 uint4
            rsc = 0
            if wf == WF_BF16:
                base = (row * k + blk * 32) * 2
                raw = [u32(m, base + 4 * i) for i in range(16)]
            else:
                qb = 16 if wf == WF_Q4 else 32
                base = (row * nb + blk) * qb
                for i in range(qb // 4):
                    raw[i] = u32(m, base + 4 * i)
                sb = rows * nb * qb + (row * nb + blk) * 2
                rsc = m[sb] | (m[sb + 1] << 8)
            dd = rsc | (rsc << 16)
            if wf == WF_BF16:
                v = [[gt_bf2h(raw[4 * c + i]) for i in range(4)] for c in range(4)]
            elif wf == WF_Q8:
                x = [w ^ 0x80808080 for w in raw[:8]]
                v = [gt_dq8(x[0], x[1], 0x64806480, dd), gt_dq8(x[2], x[3], 0x64806480, dd),
                     gt_dq8(x[4], x[5], 0x64806480, dd), gt_dq8(x[6], x[7], 0x64806480, dd)]
            else:
                a = raw[:4]
                lo = [w & 0x0F0F0F0F for w in a]
                hi = [(w >> 4) & 0x0F0F0F0F for w in a]
                v = [gt_dq8(lo[0], lo[1], 0x64086408, dd), gt_dq8(lo[2], lo[3], 0x64086408, dd),
                     gt_dq8(hi[0], hi[1], 0x64086408, dd), gt_dq8(hi[2], hi[3], 0x64086408, dd)]
            for c in range(4):
                off = r * 128 + (((4 * b + c) ^ (r & 7)) << 4)  # gw_sw(r, 4b + c)
                smem[off:off + 16] = struct.pack("<4I", *v[c])
    tile = [[0] * 64 for _ in range(128)]
    for r in range(128):
        for j in range(64):
            off = r * 128 + (((j // 8) ^ (r & 7)) << 4) + 2 * (j % 8)
            tile[r][j] = smem[off] | (smem[off + 1] << 8)
    return tile


# ---------------------------------------------------------------- section 4's operands
XBYTES = {128: 128 * 128, 256: 256 * 128}
QROW = {WF_Q4: 32, WF_Q8: 64, WF_BF16: 128}


def tma_box(smem, dst, span, src_bytes_of_row, rows_box, inner):
    """A 2D box (inner bytes x rows_box) into shared memory at dst with the given swizzle."""
    for r in range(rows_box):
        data = src_bytes_of_row(r)
        assert len(data) == inner
        for j in range(inner):
            smem[swz(dst + r * inner + j, span)] = data[j]


def section4_tile(wf, m, rows, k, kt, r0, tn, slot, base0):
    nb = k // 32
    qrow = QROW[wf]
    soff = 128 * qrow
    wbytes = soff + (128 * 16 if wf != WF_BF16 else 0)
    stage = XBYTES[tn] + wbytes
    assert stage % 1024 == 0 and base0 % 1024 == 0
    st = base0 + slot * stage
    smem = bytearray(st + stage)
    # Producer: the two 64-row halves (both of this matrix, rows r0 + 64 h).
    for h in range(2):
        rh = r0 + 64 * h
        if wf == WF_BF16:
            def row_bytes(r, rh=rh):
                o = 2 * ((rh + r) * k + kt * 64)
                return m[o:o + 128]
            tma_box(smem, st + XBYTES[tn] + h * 8192, 128, row_bytes, 64, 128)
        else:
            qb = 16 if wf == WF_Q4 else 32

            def qrow_bytes(r, rh=rh, qb=qb):
                o = (rh + r) * nb * qb + kt * qrow  # quant bytes kt * QROW.. of the row
                return m[o:o + qrow]
            span = 64 if wf == WF_Q8 else 0
            tma_box(smem, st + XBYTES[tn] + h * 64 * qrow, span, qrow_bytes, 64, qrow)

            def srow_bytes(r, rh=rh, qb=qb):
                o = rows * nb * qb + ((rh + r) * nb + (kt >> 2) * 8) * 2
                return m[o:o + 16]
            tma_box(smem, st + XBYTES[tn] + soff + h * 1024, 0, srow_bytes, 64, 16)
    # Consumers: warpgroups c = 0, 1, warps v, lanes (g, t).
    tile = [[None] * 64 for _ in range(128)]
    for c in range(2):
        for v in range(4):
            for lane in range(32):
                g, t = lane >> 2, lane & 3
                ar = c * 64 + 16 * v + g
                psel = 0x7632 if (t & 1) else 0x5410
                wa = st + XBYTES[tn]
                regs = []  # per ks: (a0, a1, a2, a3)
                if wf == WF_Q4:
                    qa, sa = wa, wa + soff + 4 * (kt & 3)
                    wq = [[0, 0], [0, 0]]
                    sc = [0, 0]
                    for h in range(2):
                        rq = qa + (ar + 8 * h) * 32 + 4 * (t >> 1)
                        for b in range(2):
                            wq[h][b] = prmt(u32(smem, rq + 16 * b), u32(smem, rq + 16 * b + 8), psel)
                        sc[h] = u32(smem, sa + (ar + 8 * h) * 16)
                    for ks in range(4):
                        b = ks >> 1
                        w, dd = [0, 0], [0, 0]
                        for h in range(2):
                            w[h] = ((wq[h][b] >> 4) if (ks & 1) else wq[h][b]) & 0x0F0F0F0F
                            dd[h] = prmt(sc[h], sc[h], 0x3232 if b else 0x1010)
                        regs.append((gtm_q4pair(w[0], 0x4140, dd[0]), gtm_q4pair(w[1], 0x4140, dd[1]),
                                     gtm_q4pair(w[0], 0x4342, dd[0]), gtm_q4pair(w[1], 0x4342, dd[1])))
                else:
                    sc = [0, 0]
                    if wf == WF_Q8:
                        for h in range(2):
                            sc[h] = u32(smem, wa + soff + 4 * (kt & 3) + (ar + 8 * h) * 16)
                    for ks in range(4):
                        lo, hi = [0, 0], [0, 0]
                        for h in range(2):
                            if wf == WF_Q8:
                                rq = wa + (ar + 8 * h) * 64 + ((ks ^ (g >> 1)) << 4) + 4 * (t >> 1)
                                w = prmt(u32(smem, rq), u32(smem, rq + 8), psel) ^ 0x80808080
                                dd = prmt(sc[h], sc[h], 0x3232 if (ks >> 1) else 0x1010)
                                lo[h] = gtm_q8pair(w, 0x4140, dd)
                                hi[h] = gtm_q8pair(w, 0x4342, dd)
                            else:
                                rb = wa + (ar + 8 * h) * 128 + 4 * t
                                lo[h] = gt_bf2h(u32(smem, rb + (((2 * ks) ^ g) << 4)))
                                hi[h] = gt_bf2h(u32(smem, rb + (((2 * ks + 1) ^ g) << 4)))
                        regs.append((lo[0], lo[1], hi[0], hi[1]))
                # The register-A fragment: warp v's rows 16 v.. of consumer c's 64.
                for ks, (a0, a1, a2, a3) in enumerate(regs):
                    row0 = c * 64 + 16 * v + g
                    for reg, rr, kk in ((a0, row0, 2 * t), (a1, row0 + 8, 2 * t),
                                        (a2, row0, 2 * t + 8), (a3, row0 + 8, 2 * t + 8)):
                        for e in range(2):
                            j = 16 * ks + kk + e
                            assert tile[rr][j] is None, "two registers for one element"
                            tile[rr][j] = (reg >> (16 * e)) & 0xFFFF
    assert all(x is not None for row in tile for x in row), "an element no register holds"
    return tile


def main():
    seed = int(sys.argv[1]) if len(sys.argv) > 1 else 1
    trials = int(sys.argv[2]) if len(sys.argv) > 2 else 3
    rng = random.Random(seed)
    names = {WF_Q4: "Q4_0", WF_Q8: "Q8_0", WF_BF16: "BF16"}
    total = 0
    for wf in (WF_Q4, WF_Q8, WF_BF16):
        for trial in range(trials):
            rows, k = 256, 768  # 12 stages; scale groups (kt / 4) 0..2
            m = make_matrix(rng, wf, rows, k)
            kt = rng.randrange(k // 64)
            r0 = rng.choice([0, 64, 128])
            tn = rng.choice([128, 256])
            slot = rng.randrange(4)
            base0 = 1024 * rng.randrange(1, 4)
            t4 = section4_tile(wf, m, rows, k, kt, r0, tn, slot, base0)
            t3 = section3_tile(wf, m, rows, k, kt, r0)
            ref = [[scratch_value(wf, m, rows, k, r0 + r, kt * 64 + j) for j in range(64)]
                   for r in range(128)]
            bad4 = sum(t4[r][j] != ref[r][j] for r in range(128) for j in range(64))
            bad3 = sum(t3[r][j] != ref[r][j] for r in range(128) for j in range(64))
            total += bad3 + bad4
            print(f"{names[wf]:5} trial {trial}: kt {kt:2} rows {r0:3}.. TN {tn} slot {slot}: "
                  f"section 4 != scratch: {bad4}, section 3 != scratch: {bad3} (of 8192)")
    print("ALL EQUAL" if total == 0 else f"MISMATCHES: {total}")
    return 0 if total == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
