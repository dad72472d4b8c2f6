//! The loader table's unit tests: how a row reads its cells' results.
use super::*;

/// A synthetic dense-vision table of `arms` (8 batches, blocks of 8, a synthetic corpus).
fn dense_table(arms: &[Arm], results: &[ArmResult]) -> FreeTable {
    build_table(
        Table::LOADER[0],
        "dense-vision",
        8,
        8,
        8,
        true,
        arms,
        results,
    )
}

/// The arms named, in that order, each with no result yet.
fn arms_named(names: &[&str]) -> (Vec<Arm>, Vec<ArmResult>) {
    let arms: Vec<Arm> = (names.iter())
        .filter_map(|n| ARMS.into_iter().find(|a| a.name == *n))
        .collect();
    assert_eq!(arms.len(), names.len());
    let results = arms.iter().map(|_| ArmResult::default()).collect();
    (arms, results)
}

/// The row of `arm` in `t`.
fn row<'t>(t: &'t FreeTable, arm: &str) -> &'t Value {
    t.rows.iter().find(|r| r["arm"] == arm).expect("row")
}

fn ok(per_batch_s: f64) -> Value {
    json!({"per_batch_s": per_batch_s, "verified": true, "verified_batches": 8})
}

#[test]
fn a_failed_run_fails_the_loader_row_and_the_limit_row_is_a_reference() {
    let (arms, mut results) = arms_named(&["bare-gather", "memcpy-limit", "python-loaderx-w4"]);
    // bare-gather: two repeats pass, the third differs from the source.
    record(&mut results[0], &ok(1e-3), 0, false);
    record(&mut results[0], &ok(1e-3), 0, false);
    let differs = json!({"per_batch_s": null, "verified": false, "mismatch": true,
        "error": "bare-gather: timed batch 50 differs from every pending step's source records"});
    record(&mut results[0], &differs, 0, false);
    // memcpy-limit: a reference; a bound, so its figure is its fastest repeat.
    for p in [1e-4, 0.8e-4, 1.25e-4] {
        record(&mut results[1], &ok(p), 0, false);
    }
    // python-loaderx-w4: one repeat passes, the next errors.
    record(&mut results[2], &ok(2e-3), 0, false);
    let error = json!({"per_batch_s": null, "verified": false, "error": "RuntimeError: boom"});
    record(&mut results[2], &error, 0, false);
    let t = dense_table(&arms, &results);
    for failed in ["bare-gather", "python-loaderx-w4"] {
        let r = row(&t, failed);
        assert_eq!(r["verified"], json!(false), "{r}");
        assert_eq!(r["samples/s"], Value::Null, "{r}");
    }
    let limit = row(&t, "memcpy-limit");
    assert_eq!(limit["verified"], Value::Null, "{limit}");
    assert_eq!(limit["samples/s"], json!(256.0 / 0.8e-4), "{limit}");
    assert_eq!(row(&t, "webdataset")["verified"], Value::Null);
}

#[test]
fn an_inline_row_carries_the_bare_gather_timed_in_its_cells() {
    let (arms, mut results) = arms_named(&["loaderx-w0", "loaderx-w4"]);
    for (w0, bare) in [(2e-3, 1.9e-3), (2.1e-3, 2e-3)] {
        let mut j = ok(w0);
        j["bare_per_batch_s"] = json!(bare);
        record(&mut results[0], &j, 0, false);
        record(&mut results[1], &ok(1e-3), 0, false);
    }
    let t = dense_table(&arms, &results);
    let batch = BATCH as f64;
    assert_eq!(
        row(&t, "loaderx-w0")[PAIRED_BARE],
        json!([batch / 1.9e-3, batch / 2e-3])
    );
    assert!(row(&t, "loaderx-w4").get(PAIRED_BARE).is_none());
    // A repeat without its pair (a cell of an older build): the row carries none, so no ratio
    // pairs a repeat with another repeat's gather.
    record(&mut results[0], &ok(2e-3), 0, false);
    let t = dense_table(&arms, &results);
    let w0 = row(&t, "loaderx-w0");
    assert!(w0.get(PAIRED_BARE).is_none(), "{w0}");
}

#[test]
fn only_the_selected_loader_tables_run() {
    let mut a = RunArgs::default();
    assert_eq!(selected(&a), Table::LOADER.to_vec());
    a.only = Some(vec![Table::LoaderRaggedTokens, Table::DenseVision]);
    assert_eq!(selected(&a), vec![Table::LoaderRaggedTokens]);
    a.only = Some(vec![Table::DenseVision]);
    assert!(selected(&a).is_empty());
}
