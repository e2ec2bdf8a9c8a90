//! Fuzz target: the safetensors header parser on arbitrary bytes. Properties: no panic;
//! an accepted header has every non-empty tensor inside the buffer, dtype-aligned, sized
//! shape x dtype, and disjoint from the others; converting any tensor never panics.

#![no_main]

use engine::model_file::safetensors::{self, parse_header};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(h) = parse_header(data) else { return };
    let buf = &data[h.data_start as usize..];
    let mut last_end = 0;
    for t in &h.tensors {
        assert!(t.begin <= t.end && t.end <= buf.len() as u64);
        assert_eq!(t.end - t.begin, t.elems * t.dtype.size());
        if t.begin < t.end {
            assert_eq!(t.begin % t.dtype.size(), 0);
            assert!(t.begin >= last_end);
            last_end = t.end;
        }
        if t.elems <= 1 << 16 {
            let mut out = vec![0f32; t.elems as usize];
            let bytes = &buf[t.begin as usize..t.end as usize];
            let r = safetensors::dequantize(&t.name, t.dtype, bytes, &mut out);
            assert_eq!(r.is_ok(), t.dtype.is_float_supported());
        }
    }
});
