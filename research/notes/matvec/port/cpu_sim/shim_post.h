// shim_post.h — C++ versions of the functions common.cuh / formats.cuh / tc.cuh write in
// inline PTX (after common.cuh's typedefs).
#pragma once

inline float f16_to_f32(u16 h) {
    const int e = (h >> 10) & 31, m = h & 1023;
    float v;
    if (e == 0) v = std::ldexp((float)m, -24);
    else if (e == 31) v = m ? NAN : INFINITY;
    else v = std::ldexp((float)(m | 1024), e - 25);
    return (h & 0x8000) ? -v : v;
}
u16 f32_to_f16(float f);  // not used by matvec.cu

// prmt.b32 (default mode): output byte i = byte s of {b, a} (a = bytes 0..3), s = nibble i
// of sel; bit 3 of the nibble replicates that byte's sign bit.
inline u32 sim_prmt(u32 a, u32 b, u32 sel) {
    const u64 ab = (u64)a | ((u64)b << 32);
    u32 r = 0;
    for (int i = 0; i < 4; i++) {
        const u32 s = (sel >> (4 * i)) & 15;
        u32 v = (u32)(ab >> (8 * (s & 7))) & 0xff;
        if (s & 8) v = (v & 0x80) ? 0xff : 0;
        r |= v << (8 * i);
    }
    return r;
}
inline float mag_byte(u32 w, int j) { return __uint_as_float(sim_prmt(w, 0x4B000000u, 0x7440u | (u32)j)); }
inline float mag_byte_r(u32 w, u32 mg, int j) { return __uint_as_float(sim_prmt(w, mg, 0x7440u | (u32)j)); }
inline u32 mag_word(u32 w) { return ((w & 0x4B000000u) | 0x4B000000u) & 0x4B000000u; }
inline void pf_l2(const void*) {}

// tc.cuh's cp.async helpers: shared addresses are offsets into sim::smem.
inline u32 gt_smem(const void* p) { return (u32)((const unsigned char*)p - sim::smem); }
inline void sim_land(const sim::Copy& c) { memcpy(sim::smem + c.dst, c.src, c.n); }
inline void sim_cp(u32 dst, const void* src, int n) {
    if (sim::late) sim::cur.push_back({dst, src, n});
    else sim_land({dst, src, n});
}
inline void gt_cp16(u32 dst, const void* src) { sim_cp(dst, src, 16); }
inline void gt_cp4(u32 dst, const void* src) { sim_cp(dst, src, 4); }
inline void gt_commit() {
    sim::pend.push_back(sim::cur);
    sim::cur.clear();
}
template <int N>
inline void gt_wait() {
    while ((int)sim::pend.size() > N) {
        for (const sim::Copy& c : sim::pend.front()) sim_land(c);
        sim::pend.erase(sim::pend.begin());
    }
}
