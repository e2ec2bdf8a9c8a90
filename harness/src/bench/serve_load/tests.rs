#![allow(clippy::unwrap_used, clippy::expect_used)]
use super::*;
use std::net::TcpListener;

/// A one-shot server answering with `response` (raw HTTP).
fn fake(response: String) -> SocketAddr {
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = l.local_addr().unwrap();
    std::thread::spawn(move || {
        let (mut s, _) = l.accept().unwrap();
        // Read the whole request head before answering (an unread rest would reset the
        // connection under the client's read).
        let mut head = Vec::new();
        let mut buf = [0u8; 4096];
        while !head.windows(4).any(|w| w == b"\r\n\r\n") {
            match s.read(&mut buf) {
                Ok(0) | Err(_) => break,
                Ok(n) => head.extend_from_slice(&buf[..n]),
            }
        }
        s.write_all(response.as_bytes()).unwrap();
    });
    addr
}

fn target(addr: SocketAddr) -> Target {
    Target {
        addr,
        model: "m".into(),
        api_key: None,
        protocol: Protocol::OpenAi,
    }
}

fn chunk(s: &str) -> String {
    format!("{:x}\r\n{s}\r\n", s.len())
}

#[test]
fn a_chunked_stream_is_timed_token_by_token() {
    // One event split across two chunks, one event with two ids, usage, [DONE].
    let body = [
        chunk("data: {\"choices\":[{\"text\":\"a\",\"tok"),
        chunk("en_ids\":[5]}]}\n\n"),
        chunk("data: {\"choices\":[{\"text\":\"bc\",\"token_ids\":[6,7]}]}\n\n"),
        // A final event flushing text without ids carries no new token.
        chunk("data: {\"choices\":[{\"text\":\"d\",\"finish_reason\":\"length\"}]}\n\n"),
        chunk("data: {\"choices\":[],\"usage\":{\"completion_tokens\":3}}\n\n"),
        chunk("data: [DONE]\n\n"),
        "0\r\n\r\n".to_string(),
    ]
    .concat();
    let resp = format!(
        "HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ntransfer-encoding: chunked\r\n\r\n{body}"
    );
    let t = stream_completion(&target(fake(resp)), &[1, 2], 3, Duration::from_secs(5)).unwrap();
    assert_eq!(t.tokens, 3);
    assert_eq!(t.token_times.len(), 3);
    assert!(t.ttft_s >= 0.0 && t.total_s >= t.ttft_s);
}

#[test]
fn a_llama_native_stream_counts_tokens_held_back_for_utf8() {
    // Token 2 ends inside a UTF-8 sequence: no event for it; the event of token 3
    // says 3 tokens so far. The final event has stop: true (no [DONE]).
    let body = [
        "data: {\"content\":\"a\",\"tokens_predicted\":1,\"stop\":false}\n\n",
        "data: {\"content\":\"\\u00e9\",\"tokens_predicted\":3,\"stop\":false}\n\n",
        "data: {\"content\":\"b\",\"tokens_predicted\":4,\"stop\":false}\n\n",
        "data: {\"content\":\"\",\"tokens_predicted\":4,\"stop\":true}\n\n",
    ]
    .concat();
    let resp = format!("HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\n\r\n{body}");
    let mut tg = target(fake(resp));
    tg.protocol = Protocol::LlamaNative;
    let t = stream_completion(&tg, &[1, 2], 4, Duration::from_secs(5)).unwrap();
    assert_eq!(t.tokens, 4);
    // Without the stop event the stream is cut.
    let resp = "HTTP/1.1 200 OK\r\n\r\ndata: {\"content\":\"a\",\"tokens_predicted\":1,\"stop\":false}\n\n".to_string();
    let mut tg = target(fake(resp));
    tg.protocol = Protocol::LlamaNative;
    let e = stream_completion(&tg, &[1], 2, Duration::from_secs(5));
    assert!(format!("{:#}", e.unwrap_err()).contains("stop event"));
}

#[test]
fn a_usage_mismatch_an_error_status_and_a_cut_stream_fail() {
    // Ids that disagree with the usage are an error.
    let body = "data: {\"choices\":[{\"text\":\"a\",\"token_ids\":[4]}]}\n\ndata: {\"choices\":[],\"usage\":{\"completion_tokens\":2}}\n\ndata: [DONE]\n\n";
    let resp = format!("HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\n\r\n{body}");
    let e = stream_completion(&target(fake(resp)), &[1], 2, Duration::from_secs(5));
    assert!(format!("{:#}", e.unwrap_err()).contains("usage says 2"));
    // Without ids, fewer text events than the usage's tokens: the usage counts them.
    let body = "data: {\"choices\":[{\"text\":\"a\"}]}\n\ndata: {\"choices\":[{\"text\":\"b\"}]}\n\ndata: {\"choices\":[],\"usage\":{\"completion_tokens\":3}}\n\ndata: [DONE]\n\n";
    let resp = format!("HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\n\r\n{body}");
    let t = stream_completion(&target(fake(resp)), &[1], 3, Duration::from_secs(5)).unwrap();
    assert_eq!((t.tokens, t.token_times.len()), (3, 2));
    // ... but never more events than tokens.
    let body = "data: {\"choices\":[{\"text\":\"a\"}]}\n\ndata: {\"choices\":[{\"text\":\"b\"}]}\n\ndata: {\"choices\":[],\"usage\":{\"completion_tokens\":1}}\n\ndata: [DONE]\n\n";
    let resp = format!("HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\n\r\n{body}");
    let e = stream_completion(&target(fake(resp)), &[1], 1, Duration::from_secs(5));
    assert!(format!("{:#}", e.unwrap_err()).contains("text events"));
    let resp = "HTTP/1.1 429 Too Many Requests\r\ncontent-length: 4\r\n\r\nbusy".to_string();
    let e = stream_completion(&target(fake(resp)), &[1], 2, Duration::from_secs(5));
    assert!(format!("{:#}", e.unwrap_err()).contains("HTTP 429"));
    let resp = "HTTP/1.1 200 OK\r\n\r\ndata: {\"choices\":[{\"text\":\"a\"}]}\n\n".to_string();
    let e = stream_completion(&target(fake(resp)), &[1], 2, Duration::from_secs(5));
    assert!(format!("{:#}", e.unwrap_err()).contains("[DONE]"));
}

#[test]
fn spec_acceptance_is_read_from_metrics() {
    let text = "# HELP x\nassay_spec_rounds_total{model=\"bench\"} 10\nassay_spec_plain_rounds_total{model=\"bench\"} 3\nassay_spec_drafted_tokens_total{model=\"bench\"} 30\nassay_spec_accepted_tokens_total{model=\"bench\"} 12\nassay_spec_position_proposed_total{model=\"bench\",position=\"1\"} 10\nassay_spec_position_accepted_total{model=\"bench\",position=\"1\"} 7\nassay_spec_position_proposed_total{model=\"bench\",position=\"2\"} 10\nassay_spec_position_accepted_total{model=\"bench\",position=\"2\"} 5\nassay_spec_position_proposed_total{model=\"bench\",position=\"3\"} 0\n";
    let s = spec_summary(text).unwrap();
    assert!(
        s.contains("10 verification rounds, 3 plain steps, drafts accepted 12/30 (40.0%)")
            && s.ends_with("per position 1: 7/10, 2: 5/10"),
        "{s}"
    );
    assert_eq!(
        spec_summary("assay_spec_rounds_total{model=\"m\"} 0\n"),
        None
    );
    let body = text.to_owned();
    let addr = fake(format!(
        "HTTP/1.1 200 OK\r\nContent-Length: {}\r\n\r\n{body}",
        body.len()
    ));
    let got = get_metrics(addr, Duration::from_secs(5)).unwrap();
    assert_eq!(spec_summary(&got), Some(s));
    let addr = fake("HTTP/1.1 500 Internal\r\nContent-Length: 0\r\n\r\n".into());
    assert!(get_metrics(addr, Duration::from_secs(5)).is_err());
}

#[test]
fn spec_cells_get_the_serve_spec_flags() {
    use crate::bench::cells::SpecCell;
    let ngram = SpecCell {
        proposer: "ngram".into(),
        k: 8,
        adaptive: true,
        policy: true,
    };
    assert_eq!(
        spec_flags(&ngram, None).unwrap(),
        ["--spec", "ngram", "--spec-k", "8", "--spec-policy", "on"]
    );
    let draft = SpecCell {
        proposer: "draft:synth:Q4_0".into(),
        k: 4,
        adaptive: false,
        policy: false,
    };
    let p = std::path::Path::new("/m/synth/llama-q4_0.gguf");
    assert_eq!(
        spec_flags(&draft, Some(p)).unwrap(),
        [
            "--spec",
            "draft:/m/synth/llama-q4_0.gguf",
            "--spec-k",
            "4",
            "--spec-policy",
            "off",
            "--spec-fixed"
        ]
    );
    assert!(spec_flags(&draft, None).is_err());
    let mtp = SpecCell {
        proposer: "mtp".into(),
        ..ngram
    };
    assert!(spec_flags(&mtp, None).is_err());
}

#[test]
fn decode_rate_quantiles_and_prompts() {
    let t = StreamTiming {
        ttft_s: 1.0,
        total_s: 3.0,
        tokens: 3,
        token_times: vec![1.0, 2.0, 3.0],
    };
    assert_eq!(t.decode_tok_s(), Some(1.0));
    let one = StreamTiming {
        token_times: vec![1.0],
        tokens: 1,
        ..t
    };
    assert_eq!(one.decode_tok_s(), None);
    let v = [5.0, 1.0, 4.0, 2.0, 3.0, 6.0, 7.0, 8.0, 9.0, 10.0];
    assert_eq!(quantile(&v, 0.5), Some(5.0));
    assert_eq!(quantile(&v, 0.9), Some(9.0));
    assert_eq!(quantile(&[], 0.5), None);
    assert_eq!(prompt_ids(3, 16).len(), 16);
    assert_ne!(prompt_ids(0, 8), prompt_ids(1, 8));
    assert!(
        prompt_ids(2, 64)
            .iter()
            .all(|&x| (1000..10_000).contains(&x))
    );
}
