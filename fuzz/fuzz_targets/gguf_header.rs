//! Fuzz target: the GGUF header parser on arbitrary bytes.
//!
//! Properties: `parse` never panics and never allocates far beyond the input; an accepted
//! header is consistent with the input (every tensor aligned and inside the file, no
//! overlaps), and it survives a round trip through the writer: writing the same metadata
//! and inventory and parsing that gives back the same metadata and tensor infos.

#![no_main]

use engine::model_file::TensorSpec;
use engine::model_file::gguf::{self, GgufHeader};
use engine::model_file::gguf_write::{GgufWriteError, GgufWriter};
use libfuzzer_sys::fuzz_target;

fn check_consistent(h: &GgufHeader, len: u64) {
    assert!(h.version == 2 || h.version == 3);
    assert!(h.alignment.is_power_of_two());
    assert_eq!(h.data_offset % h.alignment, 0);
    let mut spans: Vec<(u64, u64)> = Vec::new();
    for t in &h.tensors {
        assert_eq!(t.offset % h.alignment, 0);
        assert!(h.data_offset + t.offset + t.bytes <= len);
        assert_eq!(t.elems, t.dims.iter().product::<u64>());
        spans.push((t.offset, t.offset + t.bytes));
    }
    spans.sort();
    for w in spans.windows(2) {
        assert!(w[0].1 <= w[1].0);
    }
}

fn round_trip(h: &GgufHeader, data: &[u8]) {
    let specs: Vec<TensorSpec> = h
        .tensors
        .iter()
        .map(|t| TensorSpec::new(t.name.clone(), &t.dims, t.format))
        .collect();
    let mut w = match GgufWriter::new(Vec::new(), &h.metadata, &specs) {
        Ok(w) => w,
        // The reader accepts any integer type for general.alignment; the writer only u32.
        Err(GgufWriteError::BadAlignment(_)) => return,
        Err(e) => panic!("writer refused a header the reader accepted: {e}"),
    };
    for t in &h.tensors {
        let start = (h.data_offset + t.offset) as usize;
        w.write_tensor(&data[start..start + t.bytes as usize])
            .unwrap();
    }
    let out = w.finish().unwrap();
    let h2 = gguf::parse(&out).unwrap();
    // Debug output compares floats by value and NaN as NaN.
    assert_eq!(format!("{:?}", h.metadata), format!("{:?}", h2.metadata));
    assert_eq!(h.tensors.len(), h2.tensors.len());
    for (a, b) in h.tensors.iter().zip(&h2.tensors) {
        assert_eq!(
            (&a.name, &a.dims, a.format, a.bytes),
            (&b.name, &b.dims, b.format, b.bytes)
        );
    }
}

fuzz_target!(|data: &[u8]| {
    if let Ok(h) = gguf::parse(data) {
        check_consistent(&h, data.len() as u64);
        round_trip(&h, data);
    }
});
