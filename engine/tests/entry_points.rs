//! Every entry point a kernel family lists is defined in its source, and every kernel a
//! source defines outside a macro is listed, including the entry points the kernels' macros
//! make (per-format matvec / mmv, `matvec_<fmt>[_glu]_wr_r<R>_d<D>`,
//! `matvec_<fmt>[_glu]_wrt<NT>_r<R>_d<D>`, `gemmt_dq_<fmt>`, `gemmt_<kind>[_glu]_m<BM>_p<P>`,
//! `gemmt_<kind>[_glu]_w<BN>`, `gemmt_<kind>[_glu]_tm<TN>`, `attn_prefill_d<HD>`).
//!
//! It lives here, as an integration test, since session 11 (the unit-test copy in
//! `engine/src` was deleted).

use engine::cuda::sources::{Family, expand};

#[test]
fn every_entry_point_is_defined_in_its_family() {
    for f in Family::ALL {
        let src = expand(f).unwrap();
        for name in f.entry_points() {
            // Per-format entry points are made by a macro: `matvec_##name` + the suffix
            // list of ASSAY_FOR_EACH_FORMAT.
            let direct = src.contains(&format!(" {name}("));
            // Matvec adds a variant tail: `[_glu]##sfx##_r##R`, with sfx empty (one
            // token per pass) or `_tb` (batched; instantiated with that suffix).
            let by_macro = name.split_once('_').is_some_and(|(prefix, suffix)| {
                let tails = [
                    ("_glu_tb_r", "##_glu##sfx##_r##R(", ", _tb, "),
                    ("_tb_r", "##sfx##_r##R(", ", _tb, "),
                    ("_glu_r", "##_glu##sfx##_r##R(", ""),
                    ("_pair_r", "##_pair_r##R(", ""),
                    ("_r", "##sfx##_r##R(", ""),
                ];
                let matvec = (prefix == "matvec")
                    .then(|| {
                        tails.iter().find_map(|(pat, tail, inst)| {
                            suffix.rsplit_once(pat).map(|(f, _)| (f, *tail, *inst))
                        })
                    })
                    .flatten();
                let (fmt, tail, inst) = matvec.unwrap_or((suffix, "(", ""));
                src.contains(&format!("{prefix}_##name{tail}"))
                    && src.contains(&format!("MACRO({fmt},"))
                    && src.contains(inst)
            });
            // mmv.cu: `mmv_##fmt##[_glu]_nt##NT(` by MMV_PLAIN / MMV_GLU, instantiated by
            // `MMV_FMT(fmt, ...)` for each NT of its list; BF16's (one more x pointer) by
            // MMV_PLAIN3 / MMV_GLU3 of `MMV_FMT3(fmt, ...)`. Each list macro makes the `_x1`
            // entry points by MMV_X1.
            let mmv_lists = [("MMV_FMT", ""), ("MMV_FMT3", "3")];
            let by_x1 = name.strip_prefix("mmv_").is_some_and(|rest| {
                rest.strip_suffix("_x1").is_some_and(|body| {
                    let (fmt, tail) = if let Some(f) = body.strip_suffix("_glu") {
                        (f, "mmv_##fmt##_glu_x1(")
                    } else if let Some(f) = body.strip_suffix("_pair") {
                        (f, "mmv_##fmt##_pair_x1(")
                    } else {
                        (body, "mmv_##fmt##_x1(")
                    };
                    src.contains(tail)
                        && mmv_lists
                            .iter()
                            .any(|(list, _)| src.contains(&format!("{list}({fmt},")))
                        && src.contains("MMV_X1(fmt, G)")
                })
            });
            let by_mmv = name.strip_prefix("mmv_").is_some_and(|rest| {
                let (body, nt) = rest.rsplit_once("_nt").unwrap_or((rest, ""));
                let (fmt, tail) = match body.strip_suffix("_glu") {
                    Some(fmt) => (fmt, "mmv_##fmt##_glu_nt##NT("),
                    None => (body, "mmv_##fmt##_nt##NT("),
                };
                let glu = body.ends_with("_glu");
                let inst = if glu { "MMV_GLU" } else { "MMV_PLAIN" };
                src.contains(tail)
                    && mmv_lists.iter().any(|(list, sfx)| {
                        src.contains(&format!("{list}({fmt},"))
                            && src.contains(&format!("{inst}{sfx}(fmt, G, {nt})"))
                    })
            });
            // gemmt.cu: `gemmt_dq_##name(` per format (ASSAY_FOR_EACH_FORMAT), and
            // `gemmt_##name##[_glu]_m##BM##_p##P(` by GEMMT_ENTRY(name, KIND, WF, BM, P).
            let by_gemmt = name.strip_prefix("gemmt_").is_some_and(|rest| {
                if let Some(fmt) = rest.strip_prefix("dq_") {
                    return src.contains("gemmt_dq_##name(")
                        && src.contains(&format!("MACRO({fmt},"));
                }
                // `gemmt_##name##[_glu]_tm##TN(` by GEMMTM_ENTRY(name, WF, TN).
                if let Some((body, tn)) = rest.rsplit_once("_tm")
                    && !tn.is_empty()
                    && tn.chars().all(|c| c.is_ascii_digit())
                {
                    let (kind, tail) = match body.strip_suffix("_glu") {
                        Some(k) => (k, "gemmt_##name##_glu_tm##TN("),
                        None => (body, "gemmt_##name##_tm##TN("),
                    };
                    return src.contains(tail)
                        && src.lines().any(|l| {
                            l.starts_with(&format!("GEMMTM_ENTRY({kind},"))
                                && l.ends_with(&format!(", {tn})"))
                        });
                }
                // `gemmt_##name##[_glu]_w##BN(` by GEMMW_ENTRY(name, WF, BN).
                if let Some((body, bn)) = rest.rsplit_once("_w")
                    && bn.chars().all(|c| c.is_ascii_digit())
                {
                    let (kind, tail) = match body.strip_suffix("_glu") {
                        Some(k) => (k, "gemmt_##name##_glu_w##BN("),
                        None => (body, "gemmt_##name##_w##BN("),
                    };
                    return src.contains(tail)
                        && src.lines().any(|l| {
                            l.starts_with(&format!("GEMMW_ENTRY({kind},"))
                                && l.ends_with(&format!(", {bn})"))
                        });
                }
                let Some((body, p)) = rest.rsplit_once("_p") else {
                    return false;
                };
                let Some((body, m)) = body.rsplit_once("_m") else {
                    return false;
                };
                let (kind, tail) = match body.strip_suffix("_glu") {
                    Some(k) => (k, "gemmt_##name##_glu_m##BM##_p##P("),
                    None => (body, "gemmt_##name##_m##BM##_p##P("),
                };
                src.contains(tail)
                    && src.lines().any(|l| {
                        l.starts_with(&format!("GEMMT_ENTRY({kind},"))
                            && l.ends_with(&format!(", {m}, {p})"))
                    })
            });
            // matvec.cu's streamed kernel: `matvec_##name##[_glu|_seg3|_seg3rope]_wr_r##R##_d##D(`
            // by the `ASSAY_MATVEC_[GLU_|SEG3_|SEG3ROPE_]WR_R(name, F, R, D)` lines of the list
            // macro the format is instantiated with: `ASSAY_MATVEC_WR(fmt, ...)` (Q4_0, Q8_0)
            // or `ASSAY_MATVEC_WR_HALF(fmt, ...)` (BF16's rings, no seg3rope); the line must
            // be in that macro's definition.
            let by_wr = name.strip_prefix("matvec_").is_some_and(|rest| {
                let Some((body, rd)) = rest.split_once("_wr_r") else {
                    return false;
                };
                let Some((r, d)) = rd.split_once("_d") else {
                    return false;
                };
                let (fmt, tail, inst) = if let Some(f) = body.strip_suffix("_glu") {
                    (
                        f,
                        "matvec_##name##_glu_wr_r##R##_d##D(",
                        "ASSAY_MATVEC_GLU_WR_R",
                    )
                } else if let Some(f) = body.strip_suffix("_seg3rope") {
                    // The segmented entry points with rope_kv in their epilogue.
                    (
                        f,
                        "matvec_##name##_seg3rope_wr_r##R##_d##D(",
                        "ASSAY_MATVEC_SEG3ROPE_WR_R",
                    )
                } else if let Some(f) = body.strip_suffix("_seg3") {
                    // The segmented entry points (q, k and v in one launch).
                    (
                        f,
                        "matvec_##name##_seg3_wr_r##R##_d##D(",
                        "ASSAY_MATVEC_SEG3_WR_R",
                    )
                } else {
                    (body, "matvec_##name##_wr_r##R##_d##D(", "ASSAY_MATVEC_WR_R")
                };
                let Some(list) = ["ASSAY_MATVEC_WR", "ASSAY_MATVEC_WR_HALF"]
                    .into_iter()
                    .find(|m| src.lines().any(|l| l.starts_with(&format!("{m}({fmt},"))))
                else {
                    return false;
                };
                let Some((_, rest)) = src.split_once(&format!("#define {list}(name, F)")) else {
                    return false;
                };
                // The macro's definition: its lines up to the first without a continuation.
                let mut def = String::new();
                for l in rest.lines() {
                    def.push_str(l);
                    def.push('\n');
                    if !l.trim_end().ends_with('\\') {
                        break;
                    }
                }
                src.contains(tail) && def.contains(&format!("    {inst}(name, F, {r}, {d})"))
            });
            // matvec.cu's multi-token streamed kernel: `matvec_##name##[_glu]_wrt##NT##_r##R##_d##D(`
            // by the `ASSAY_MATVEC_[GLU_]WRT_R(name, F, NT, R, D)` lines of ASSAY_MATVEC_WRT,
            // instantiated by `ASSAY_MATVEC_WRT(fmt, ...)`.
            let by_wrt = name.strip_prefix("matvec_").is_some_and(|rest| {
                let Some((body, trd)) = rest.split_once("_wrt") else {
                    return false;
                };
                let Some((t, rd)) = trd.split_once("_r") else {
                    return false;
                };
                let Some((r, d)) = rd.split_once("_d") else {
                    return false;
                };
                let (fmt, tail, inst) = if let Some(f) = body.strip_suffix("_glu") {
                    (
                        f,
                        "matvec_##name##_glu_wrt##NT##_r##R##_d##D(",
                        "ASSAY_MATVEC_GLU_WRT_R",
                    )
                } else {
                    (
                        body,
                        "matvec_##name##_wrt##NT##_r##R##_d##D(",
                        "ASSAY_MATVEC_WRT_R",
                    )
                };
                src.contains(tail)
                    && src.contains(&format!("    {inst}(name, F, {t}, {r}, {d})"))
                    && src
                        .lines()
                        .any(|l| l.starts_with(&format!("ASSAY_MATVEC_WRT({fmt},")))
            });
            // attention.cu (attention/prefill.cuh): `attn_prefill_d##HD(`,
            // `attn_prefill_pk_d##HD(`, `attn_prefill_pk1_d##HD(` and flash4's
            // `attn_prefill_pk1s_d##HD(` by ATTN_PREFILL(HD).
            let by_prefill = [
                "attn_prefill_d",
                "attn_prefill_pk_d",
                "attn_prefill_pk1_d",
                "attn_prefill_pk1s_d",
            ]
            .iter()
            .any(|prefix| {
                name.strip_prefix(prefix).is_some_and(|hd| {
                    hd.chars().all(|c| c.is_ascii_digit())
                        && src.contains(&format!("{prefix}##HD("))
                        && src.lines().any(|l| l == format!("ATTN_PREFILL({hd})"))
                })
            });
            assert!(
                direct || by_macro || by_mmv || by_x1 || by_gemmt || by_wr || by_wrt || by_prefill,
                "{name} is not defined in {}",
                f.file()
            );
        }
        // And every kernel the file defines is listed (kernels defined inside a macro
        // body, lines ending in `\`, are the per-format ones checked above; their
        // `__global__ void` may be followed by a launch-bounds parameter, not a name).
        for line in src
            .lines()
            .filter(|l| l.contains("__global__ void") && !l.trim_end().ends_with('\\'))
        {
            if let Some(rest) = line.split("__global__ void").nth(1) {
                let name = rest.trim().split('(').next().unwrap_or("").trim();
                if !name.is_empty() && !name.contains("##") && !name.starts_with("__launch") {
                    assert!(
                        f.entry_points().iter().any(|e| e == name),
                        "{name} not listed"
                    );
                }
            }
        }
    }
}
