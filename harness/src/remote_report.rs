//! `tables.md` of a `harness remote` run, from its `results.json` (always built, so that
//! `harness render` and the committed-tables test read a remote run without the `remote` feature;
//! the run itself is `remote_table`).

use serde_json::Value;

const COLUMNS: &str =
    "row | MiB/s | sd | batches/s | × GET limit | × local warm | × best peer | verified";

pub fn render(report: &Value) -> String {
    let mut s = format!(
        "Run at commit `{}` on {}.\n\n",
        report["source"]["git_commit"].as_str().unwrap_or("unknown"),
        crate::machine::machine_line(&report["machine"])
    );
    for t in report["tables"].as_array().into_iter().flatten() {
        s.push_str(&format!(
            "### {}\n\n{} records, IID batches of {}, {} timed batches per repeat, {} repeats (median; sd over repeats). \
             SeaweedFS on loopback, one `weed server`. Peers as their docs read S3 (notes below), each repeat \
             in a fresh process with an empty local cache: up to {} timed batches in blocks of 8, each block after 32 drained \
             ones (the loader tables' protocol; the drains fetch too).\n\n",
            t["name"].as_str().unwrap_or(""),
            t["records"],
            t["batch"],
            t["timed batches per repeat"],
            t["repeats"],
            t["peer timed batches per repeat"],
        ));
        let num =
            |v: &Value, d: usize| v.as_f64().map_or("–".to_string(), |x| format!("{x:.d$}"));
        let mut lines = Vec::new();
        for r in t["rows"].as_array().into_iter().flatten() {
            let verified = match (r["verified"].as_bool(), r["row"].as_str()) {
                (Some(true), _) => "yes",
                (Some(false), _) => "**NO**",
                (None, Some("get-limit")) => "reference",
                (None, _) => "not measured",
            };
            lines.push(vec![
                r["row"].as_str().unwrap_or("").to_string(),
                num(&r["MiB/s"], 0),
                num(&r["MiB/s sd"], 0),
                num(&r["batches/s"], 1),
                num(&r["x GET limit"], 2),
                num(&r["x local warm"], 2),
                num(&r["x best peer"], 2),
                verified.to_string(),
            ]);
        }
        s.push_str(&crate::table::md_table(COLUMNS, "lrrrrrrl", &lines));
        s.push('\n');
        for r in t["rows"].as_array().into_iter().flatten() {
            if let Some(note) = r["note"].as_str() {
                s.push_str(&format!(
                    "- `{}`: {note}\n",
                    r["row"].as_str().unwrap_or("")
                ));
            }
        }
        s.push('\n');
        for g in t["goals"].as_array().into_iter().flatten() {
            s.push_str(&format!(
                "Goal: {}: {}.\n",
                g["goal"].as_str().unwrap_or(""),
                match (g["ratio"].as_f64(), g["met"].as_bool()) {
                    (Some(x), Some(true)) => format!("{x:.2}x, met"),
                    (Some(x), _) => format!("{x:.2}x, **MISSED**"),
                    _ => "not measured".to_string(),
                }
            ));
        }
        s.push('\n');
    }
    s
}

/// The peers that download a whole chunk or shard (64 MB here) into a local directory at its
/// first miss and keep it: by their timed batches (after the drained ones) a quick-size store is
/// on their disk, so they read a local copy, as the cached zrecord row does. The others read the
/// server in every batch, as the cold one does.
#[cfg(any(feature = "remote", test))]
const LOCAL_COPY: [&str; 2] = ["litdata-s3-w4", "streaming-s3-w4"];

/// The goals, checked against a table's own rows: cold `zrecord-raw` (no cache) at least
/// 0.8x the GET limit and 2x the best verified peer that reads the server in its timed batches;
/// `zrecord-raw-cached` at least 0.8x the local warm gather, and 2x the best verified peer that
/// reads a local copy by then ([`LOCAL_COPY`]: the like-for-like pairing of the 2x goal). A
/// missing or unverified row: "not measured". The peers are `rows[first_peer..]`.
#[cfg(any(feature = "remote", test))]
pub fn goals(rows: &[Value], first_peer: usize) -> Vec<Value> {
    let row = |name: &str| rows.iter().find(|r| r["row"] == name);
    let verified = |r: &&Value| r["verified"] == true;
    let check = |what: String, name: &str, x: Option<f64>, goal: f64| {
        serde_json::json!({"goal": what, "row": name, "ratio": x, "target": goal,
               "met": x.map(|x| x >= goal)})
    };
    let col = |name: &str, col: &str| row(name).filter(verified).and_then(|r| r[col].as_f64());
    // The best verified peer of each kind, and a zrecord row's speed over it.
    let best = |copying: bool| {
        rows[first_peer.min(rows.len())..]
            .iter()
            .filter(verified)
            .filter(|r| LOCAL_COPY.iter().any(|c| r["row"] == *c) == copying)
            .filter_map(|r| Some((r["row"].as_str()?, r["MiB/s"].as_f64()?)))
            .max_by(|x, y| x.1.total_cmp(&y.1))
    };
    let over = |name: &str, peer: Option<(&str, f64)>| {
        col(name, "MiB/s").zip(peer).map(|(m, (_, p))| m / p)
    };
    let (ranged, copying) = (best(false), best(true));
    let name = |p: Option<(&str, f64)>| p.map_or("none verified", |p| p.0).to_string();
    vec![
        check(
            "cold zrecord-raw >= 0.8x the GET limit".into(),
            "zrecord-raw",
            col("zrecord-raw", "x GET limit"),
            0.8,
        ),
        check(
            format!(
                "cold zrecord-raw >= 2x the best peer that reads the server in its timed batches \
                 ({}; {} download whole 64 MB chunks into a local copy at a first miss and read \
                 that copy by then)",
                name(ranged),
                LOCAL_COPY.join(" and ")
            ),
            "zrecord-raw",
            over("zrecord-raw", ranged),
            2.0,
        ),
        check(
            "cached zrecord-raw >= 0.8x the local warm gather".into(),
            "zrecord-raw-cached",
            col("zrecord-raw-cached", "x local warm"),
            0.8,
        ),
        check(
            format!(
                "cached zrecord-raw >= 2x the best peer that reads its local copy ({})",
                name(copying)
            ),
            "zrecord-raw-cached",
            over("zrecord-raw-cached", copying),
            2.0,
        ),
    ]
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn row(name: &str, mibs: f64, verified: bool) -> Value {
        json!({"row": name, "MiB/s": mibs, "verified": verified,
               "x GET limit": mibs / 100.0, "x local warm": mibs / 1000.0})
    }

    /// Cold reads are held against the best peer that reads the server per batch, cached ones
    /// against the best that reads a local copy; an unverified peer counts for neither.
    #[test]
    fn each_zrecord_row_is_held_against_the_peers_of_its_kind() {
        let rows = vec![
            row("get-limit", 100.0, false),
            row("zrecord-raw", 90.0, true),
            row("zrecord-raw-cache-cold", 300.0, true),
            row("zrecord-raw-cached", 900.0, true),
            row("zrecord-raw-local", 1000.0, true),
            row("litdata-s3-w4", 30.0, true),
            row("streaming-s3-w4", 600.0, true),
            row("lance-s3-take", 60.0, true),
        ];
        let g = goals(&rows, 5);
        assert_eq!(g.len(), 4);
        assert!(g[1]["goal"].as_str().unwrap().contains("(lance-s3-take;"));
        assert_eq!(g[1]["ratio"], json!(1.5));
        assert_eq!(g[1]["met"], json!(false));
        assert!(g[3]["goal"].as_str().unwrap().contains("(streaming-s3-w4)"));
        assert_eq!(g[3]["ratio"], json!(1.5));
        assert_eq!(g[2]["met"], json!(true));

        let mut rows = rows;
        rows[7]["verified"] = json!(false);
        rows[6]["MiB/s"] = json!(20.0);
        let g = goals(&rows, 5);
        assert!(g[1]["goal"].as_str().unwrap().contains("(none verified;"));
        assert_eq!(g[1]["met"], Value::Null);
        assert!(g[3]["goal"].as_str().unwrap().contains("(litdata-s3-w4)"));
        assert_eq!(g[3]["ratio"], json!(30.0));
    }
}
