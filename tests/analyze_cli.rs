//! `ordo analyze` and `ordo export` as a user runs them, on traces made by hand:
//! the JSON document's shape, the text report, bad input.

use crate::common;

use ordo_analysis::synthetic::TraceBuilder;

fn ab_ba_trace(path: &std::path::Path) {
    let mut b = TraceBuilder::new();
    b.ab_ba(0xa0, 0xb0, 0x400);
    b.write_to(path).unwrap();
}

#[test]
fn json_document_has_the_documented_shape() {
    let dir = common::scratch("analyze_cli_json");
    let trace = dir.join("t.ordo");
    ab_ba_trace(&trace);
    let out = common::run_ordo(&["analyze", "--json", trace.to_str().unwrap()]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let doc: serde_json::Value = serde_json::from_slice(&out.stdout).expect("one JSON document");
    let findings = doc["findings"].as_array().unwrap();
    assert!(!findings.is_empty());
    let kinds = [
        "deadlock",
        "lost_wakeup",
        "barging",
        "race",
        "atomicity",
        "after_release",
        "reorder",
    ];
    let mut last = (0, 0, 0, 0);
    for f in findings {
        assert!(kinds.contains(&f["kind"].as_str().unwrap()), "{f}");
        assert!(f["threads"].as_array().unwrap().iter().all(|t| t
            .as_str()
            .unwrap()
            .parse::<ordo_trace::LogicalId>()
            .is_ok()));
        for o in f["objects"].as_array().unwrap() {
            assert!(o["addr"].as_str().unwrap().starts_with("0x"), "{o}");
            assert!(o["name"].is_null() || o["name"].is_string());
        }
        assert!(!f["sites"].as_array().unwrap().is_empty());
        assert!(f["message"].as_str().unwrap().len() > 10);
        ordo_analysis::schedule::Schedule::parse(f["schedule"].as_str().unwrap())
            .expect("the schedule parses");
        let r = &f["rank"];
        // By (v, t), harmful shapes, then sections after a release, then the
        // rest; then distance.
        let tier = if f["harmful"] == true {
            0
        } else if f["kind"] == "after_release" {
            1
        } else {
            2
        };
        let rank = (
            r["v"].as_u64().unwrap(),
            r["t"].as_u64().unwrap(),
            tier,
            r["distance"].as_u64().unwrap(),
        );
        assert!(rank >= last, "findings ordered by rank");
        last = rank;
    }
    let deadlock = findings
        .iter()
        .find(|f| f["kind"] == "deadlock")
        .expect("the AB-BA cycle");
    assert_eq!(deadlock["threads"], serde_json::json!(["1", "2"]));
    assert_eq!(deadlock["objects"][0]["addr"], "0xa0");
    // Predicted bugs apart from orders worth trying.
    assert_eq!(deadlock["class"], "predicted_bug");
    for f in findings {
        let bug = ["deadlock", "lost_wakeup", "race"].contains(&f["kind"].as_str().unwrap());
        let class = if bug { "predicted_bug" } else { "order_to_try" };
        assert_eq!(f["class"], class, "{f}");
    }
    let stats = &doc["stats"];
    assert_eq!(
        stats["predicted_bugs"].as_u64().unwrap() + stats["orders_to_try"].as_u64().unwrap(),
        findings.len() as u64
    );
    assert!(stats["predicted_bugs"].as_u64().unwrap() >= 1);
    assert_eq!(stats["events"], 16);
    assert_eq!(stats["threads"], 3);
    assert_eq!(stats["dropped"], 0);
}

#[test]
fn text_report_groups_findings_by_kind() {
    let dir = common::scratch("analyze_cli_text");
    let trace = dir.join("t.ordo");
    ab_ba_trace(&trace);
    let out = common::run_ordo(&["analyze", trace.to_str().unwrap()]);
    assert!(out.status.success());
    let text = String::from_utf8(out.stdout).unwrap();
    assert!(
        text.contains("deadlock (1): predicted to be a bug"),
        "{text}"
    );
    assert!(text.contains("orders worth trying"), "{text}");
    assert!(text.contains("rank v=2 t=2"), "{text}");
    assert!(
        text.contains("1:mutex_lock(@1)#1 && 2:mutex_lock(@1)#1 -> 1:mutex_lock(@2)#1"),
        "{text}"
    );
    // Groups come in a fixed kind order: deadlocks before reorders.
    assert!(
        text.find("deadlock (").unwrap() < text.find("reorder (").unwrap(),
        "{text}"
    );
}

#[test]
fn bad_input_is_one_line_naming_the_file() {
    let dir = common::scratch("analyze_cli_bad");
    let trace = dir.join("bad.ordo");
    std::fs::write(&trace, b"ORDOTRC\0\x07garbage that is not a record").unwrap();
    for args in [
        vec!["analyze", trace.to_str().unwrap()],
        vec![
            "export",
            "--perfetto",
            trace.to_str().unwrap(),
            "-o",
            "/dev/null",
        ],
    ] {
        let out = common::run_ordo(&args);
        assert_eq!(out.status.code(), Some(2));
        let err = String::from_utf8(out.stderr).unwrap();
        assert_eq!(err.lines().count(), 1, "{err}");
        assert!(
            err.starts_with("ordo: ") && err.contains("bad.ordo") && err.contains("at byte 8"),
            "{err}"
        );
    }
    let missing = common::run_ordo(&["analyze", "/nonexistent/t.ordo"]);
    assert_eq!(missing.status.code(), Some(2));
}

#[test]
fn export_writes_a_perfetto_trace() {
    let dir = common::scratch("analyze_cli_export");
    let trace = dir.join("t.ordo");
    let out_file = dir.join("t.pftrace");
    ab_ba_trace(&trace);
    let out = common::run_ordo(&[
        "export",
        "--perfetto",
        trace.to_str().unwrap(),
        "-o",
        out_file.to_str().unwrap(),
    ]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let decoded =
        ordo_analysis::perfetto::Trace::from_bytes(&std::fs::read(&out_file).unwrap()).unwrap();
    assert!(decoded.packet.len() > 16);
    let without_format = common::run_ordo(&[
        "export",
        trace.to_str().unwrap(),
        "-o",
        out_file.to_str().unwrap(),
    ]);
    assert_eq!(without_format.status.code(), Some(2));
}
