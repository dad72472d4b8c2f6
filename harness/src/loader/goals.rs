//! The goals line under each loader table: the targets checked against the table's own
//! rows (measured side by side in one run). Rendered by `report`.

use serde_json::Value;

use crate::model::FreeTable;
use crate::table::{BARE_ROW, LIMIT_ROW, Table};

/// A loader table's goals, each checked against the table's own rows (all measured side by side
/// in one run): the ordered Python headline at or above the best peer row and 5x (dense) or 20x
/// (ragged) the torch `DataLoader` with the same workers, the ordered Rust loader at or above
/// 0.9x the bare gather. A goal whose rows are missing, failed or unverified says so; a missed
/// goal says "MISSED". Empty for other tables.
pub fn render(t: &FreeTable) -> String {
    let torch_factor = match t.name {
        Table::LoaderDenseVision => 5.0,
        Table::LoaderRaggedTokens => 20.0,
        _ => return String::new(),
    };
    // A row's samples/s when it ran and verified its batches.
    let speed = |r: &Value| -> Option<f64> {
        let ok = r["verified"].as_bool() == Some(true);
        let v = r["samples/s"].as_f64()?;
        (ok && v > 0.0).then_some(v)
    };
    let row = |arm: &str| t.rows.iter().find(|r| r["arm"].as_str() == Some(arm));
    // Tables from before the equal contract (ordered headline rows, a completion-order row
    // beside them) did not measure what the goals compare.
    if row("python-loaderx-w4-completion").is_none() {
        return String::new();
    }
    let arm_speed = |arm: &str| row(arm).and_then(speed);
    let is_peer = |arm: &str| !(arm.contains("loaderx") || arm == BARE_ROW || arm == LIMIT_ROW);
    let best_peer = t
        .rows
        .iter()
        .filter_map(|r| {
            let arm = r["arm"].as_str()?;
            is_peer(arm).then_some((arm, speed(r)?))
        })
        .max_by(|a, b| a.1.total_cmp(&b.1));
    let verdict = |ratio: Option<f64>, goal: f64| match ratio {
        Some(x) if x >= goal => format!("{x:.2}x: met"),
        Some(x) => format!("{x:.2}x: **MISSED**"),
        None => "not measured (a row is missing, failed or unverified)".to_string(),
    };
    let head = arm_speed("python-loaderx-w4");
    let mut lines = vec![format!(
        "Goals (samples/s ratios within this run; ordered rows): `python-loaderx-w4` over the best peer{} ≥ 1.0x: {}",
        best_peer.map_or(String::new(), |(arm, _)| format!(" (`{arm}`)")),
        verdict(head.zip(best_peer).map(|(h, (_, p))| h / p), 1.0)
    )];
    lines.push(format!(
        "`python-loaderx-w4` over `torch-dataloader-w4` ≥ {torch_factor:.0}x: {}",
        verdict(
            head.zip(arm_speed("torch-dataloader-w4"))
                .map(|(h, p)| h / p),
            torch_factor
        )
    ));
    lines.push(format!(
        "`loaderx-w4` over `bare-gather` ≥ 0.9x: {}",
        verdict(
            arm_speed("loaderx-w4")
                .zip(arm_speed(BARE_ROW))
                .map(|(l, b)| l / b),
            0.9
        )
    ));
    let mut s: String = lines.iter().map(|l| format!("- {l}\n")).collect();
    s.push('\n');
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    fn loader_table(name: Table, rows: &[(&str, f64, Option<bool>)]) -> FreeTable {
        FreeTable {
            name,
            title: String::new(),
            synthetic: false,
            columns: vec!["arm".into(), "samples/s".into()],
            rows: rows
                .iter()
                .map(
                    |&(arm, v, ok)| serde_json::json!({"arm": arm, "samples/s": v, "verified": ok}),
                )
                .collect(),
        }
    }

    /// The goals are read from the table's own rows: the best verified peer (a reference row is
    /// no peer), the torch factor of the table kind, and an unverified row measures nothing.
    #[test]
    fn loader_goals_compare_rows_of_the_table() {
        let t = loader_table(
            Table::LoaderRaggedTokens,
            &[
                ("memcpy-limit", 9000.0, None),
                ("bare-gather", 1000.0, Some(true)),
                ("loaderx-w4", 850.0, Some(true)),
                ("python-loaderx-w4", 800.0, Some(true)),
                ("python-loaderx-w4-completion", 900.0, Some(true)),
                ("torch-dataloader-w4", 50.0, Some(true)),
                ("grain-w4", 400.0, Some(true)),
                ("spdl-thread-w4", 900.0, Some(false)),
            ],
        );
        let g = render(&t);
        assert!(
            g.contains("best peer (`grain-w4`) ≥ 1.0x: 2.00x: met"),
            "{g}"
        );
        assert!(g.contains("≥ 20x: 16.00x: **MISSED**"), "{g}");
        assert!(g.contains("≥ 0.9x: 0.85x: **MISSED**"), "{g}");
        let t = loader_table(
            Table::LoaderDenseVision,
            &[
                ("python-loaderx-w4", 800.0, Some(true)),
                ("python-loaderx-w4-completion", 900.0, Some(true)),
                ("torch-dataloader-w4", 100.0, Some(false)),
            ],
        );
        let g = render(&t);
        assert_eq!(g.matches("not measured").count(), 3, "{g}");
        assert!(render(&loader_table(Table::Sampler, &[])).is_empty());
    }
}
