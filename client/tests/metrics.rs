//! The Prometheus endpoint (`--metrics`): counters and per-request latency histograms in the
//! text format, after real requests; anything but `/metrics` is 404.

mod common;

use common::*;
use madfs_client::FileSystem;
use std::io::{Read, Write};
use std::time::Duration;

fn get_http(addr: &str, path: &str) -> String {
    let mut s = std::net::TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    write!(s, "GET {path} HTTP/1.1\r\nHost: {addr}\r\n\r\n").unwrap();
    let mut out = String::new();
    s.read_to_string(&mut out).unwrap();
    out
}

#[test]
fn requests_and_latencies_are_scraped() {
    let cl = cluster(1, &["--metrics", "127.0.0.1:0"], "none");
    let log = cl.log(0);
    let addr = log
        .split("metrics: http://")
        .nth(1)
        .and_then(|r| r.split("/metrics").next())
        .unwrap_or_else(|| panic!("no metrics address in the log:\n{log}"))
        .to_string();
    let c = client(&cl, Duration::from_secs(10), "none");
    c.mkdir("/m", 0o755).unwrap();
    put(&c, "/m/f", &data(100_000, 1), 100_000, false);
    assert_eq!(get(&c, "/m/f"), data(100_000, 1));
    c.stat("/m/f").unwrap();

    let page = get_http(&addr, "/metrics");
    assert!(page.starts_with("HTTP/1.1 200 OK"), "{page}");
    let body = page.split("\r\n\r\n").nth(1).unwrap();
    let value = |line: &str| -> f64 {
        body.lines()
            .find(|l| l.starts_with(line))
            .and_then(|l| l.rsplit(' ').next())
            .and_then(|v| v.parse().ok())
            .unwrap_or_else(|| panic!("no {line} in:\n{body}"))
    };
    assert_eq!(value("madfs_requests_total{op=\"mkdir\"}"), 1.0);
    // (a stat that may be kept is a `look`)
    assert!(value("madfs_requests_total{op=\"look\"}") >= 1.0);
    assert_eq!(value("madfs_request_seconds_count{op=\"mkdir\"}"), 1.0);
    assert!(value("madfs_request_seconds_sum{op=\"mkdir\"}") > 0.0);
    // every request lands in the +Inf bucket; buckets never decrease
    let buckets: Vec<f64> = body
        .lines()
        .filter(|l| l.starts_with("madfs_request_seconds_bucket{") && l.contains("op=\"look\""))
        .map(|l| l.rsplit(' ').next().unwrap().parse().unwrap())
        .collect();
    assert!(buckets.len() > 10, "{body}");
    assert!(buckets.windows(2).all(|w| w[0] <= w[1]), "{buckets:?}");
    assert_eq!(
        *buckets.last().unwrap(),
        value("madfs_request_seconds_count{op=\"look\"}")
    );
    assert!(value("madfs_bytes_in_total") >= 100_000.0);
    assert!(value("madfs_live_connections") >= 1.0);
    assert!(value("madfs_data_bytes") > value("madfs_data_free_bytes"));
    assert!(
        body.contains("# TYPE madfs_request_seconds histogram"),
        "{body}"
    );
    assert!(body.trim_end().ends_with("# EOF"), "{body}");

    assert!(get_http(&addr, "/").starts_with("HTTP/1.1 404"));
}
