//! The gate's unit tests: its rules on synthetic runs (noise passes, a quarter slower fails, facts
//! are final, each machine kind is held to its own baseline).
use super::violation::retry_tables;
use super::*;
use serde_json::json;

/// A quick run: one store table and one loader table.
fn run(zr: f64, lx: f64, bare: f64, limit: f64) -> Value {
    json!({"schema": SCHEMA, "tables": [
        {"name": "dense-vision", "rows": [
            {"backend": "zrecord-raw", "gather_mib_s": zr, "x_memcpy": zr / 10000.0, "verified": true, "status": "ok"},
            {"backend": "lmdb-raw", "gather_mib_s": 3000.0, "x_memcpy": 0.3, "verified": true, "status": "ok"},
            {"backend": "memcpy-limit", "gather_mib_s": 10000.0, "x_memcpy": 1.0, "verified": null, "status": "ok"}
        ]},
        {"name": "loader-ragged-tokens", "rows": [
            {"arm": "memcpy-limit", "samples/s": limit, "verified": null},
            {"arm": "bare-gather", "samples/s": bare, "verified": true},
            {"arm": "python-loaderx-w4", "samples/s": lx, "verified": true},
            {"arm": "torch-dataloader-w4", "samples/s": 9000.0, "verified": true},
            {"arm": "webdataset", "samples/s": null, "verified": null}
        ]}
    ]})
}

fn baseline() -> Baseline {
    let runs = [
        run(5000.0, 40_000.0, 30_000.0, 100_000.0),
        run(5200.0, 41_000.0, 31_000.0, 101_000.0),
        run(4900.0, 39_000.0, 29_500.0, 99_000.0),
    ];
    Baseline::from_runs(&runs, Vec::new()).expect("baseline")
}

#[test]
fn noise_passes_and_a_quarter_slower_fails() {
    let b = baseline();
    // zrecord-raw has two figures: over the limit (here no limit was timed beside its cells, so
    // the row over the limit row) and the row over the limit row.
    assert_eq!(b.figures.len(), 4, "{:?}", b.figures);
    let now = run(5050.0, 40_500.0, 30_200.0, 100_500.0);
    assert!(check(&b, &now, false).is_empty());
    // A few per cent down: within every band.
    assert!(check(&b, &run(4800.0, 38_500.0, 29_000.0, 100_000.0), false).is_empty());
    // Each gated row 25 % slower, one at a time and all at once: each one fails. All at once,
    // the loader row keeps its share of the bare gather (x_bare), which itself fails (x_limit).
    let gated = |_: &str, r: &Value| is_gated_row(r);
    let v = check(&b, &slowed(&now, SLOWER, &gated), false);
    assert_eq!(v.len(), 3, "{v:?}");
    assert!(v.iter().all(|x| x.speed));
    assert_eq!(
        retry_tables(&v),
        vec![
            "dense-vision".to_string(),
            "loader-ragged-tokens".to_string()
        ]
    );
    for row in ["zrecord-raw", "bare-gather", "python-loaderx-w4"] {
        let one = |_: &str, r: &Value| text(r, "backend") == row || text(r, "arm") == row;
        let v = check(&b, &slowed(&now, SLOWER, &one), false);
        let figures = if row == "zrecord-raw" { 2 } else { 1 };
        assert_eq!(v.len(), figures, "{row}: {v:?}");
        assert!(v.iter().all(|x| x.msg.contains(row)), "{v:?}");
    }
    // A slower peer or a faster limit row is not loaderx's regression... unless the limit
    // row gets faster by more than the band: then loaderx's share of it fell, and it fails.
    let peer = |_: &str, r: &Value| text(r, "arm") == "torch-dataloader-w4";
    assert!(check(&b, &slowed(&now, 0.5, &peer), false).is_empty());
}

#[test]
fn the_gate_reads_the_best_repeat_of_each_row() {
    let b = baseline();
    // Three repeats; a neighbour slowed two of them by 40 %: the best one is the row's speed.
    let mut now = run(5050.0, 40_500.0, 30_200.0, 100_500.0);
    now["tables"][0]["rows"][0]["repeats"] =
        json!([{"gather_mib_s": 3000.0}, {"gather_mib_s": 5050.0}, {"gather_mib_s": 3030.0}]);
    now["tables"][0]["rows"][0]["gather_mib_s"] = json!(3030.0);
    now["tables"][1]["rows"][2]["samples/s repeats"] = json!([24_300.0, 24_000.0, 40_500.0]);
    now["tables"][1]["rows"][2]["samples/s"] = json!(24_300.0);
    assert!(
        check(&b, &now, false).is_empty(),
        "{:?}",
        check(&b, &now, false)
    );
    // A repeat that failed does not count.
    let mut failed = now.clone();
    failed["tables"][0]["rows"][0]["repeats"][1]["status"] = json!("failed");
    assert_eq!(
        check(&b, &failed, false).len(),
        2,
        "both zrecord-raw figures"
    );
    // 25 % slower in every repeat: the best repeat is 25 % slower too, and fails.
    let one = |_: &str, r: &Value| text(r, "arm") == "python-loaderx-w4";
    let v = check(&b, &slowed(&now, SLOWER, &one), false);
    assert!(
        v.len() == 1 && v[0].msg.contains("python-loaderx-w4 x_bare"),
        "{v:?}"
    );
    let figs = figures(&now);
    let metric = |row: &str| figs.iter().find(|f| f.row == row).map(|f| f.metric);
    assert_eq!(metric("bare-gather"), Some("x_limit"));
    assert_eq!(metric("python-loaderx-w4"), Some("x_bare"));
    assert_eq!(metric("zrecord-raw"), Some("x_memcpy"));
}

#[test]
fn spread_runs_widen_the_band_but_never_move_the_center() {
    let runs = [
        run(5000.0, 40_000.0, 30_000.0, 100_000.0),
        run(5010.0, 40_100.0, 30_050.0, 100_000.0),
        run(4990.0, 39_900.0, 29_950.0, 100_000.0),
    ];
    let tight = Baseline::from_runs(&runs, Vec::new()).expect("baseline");
    let other_vms = [
        run(5500.0, 44_000.0, 27_000.0, 100_000.0),
        run(4600.0, 36_000.0, 33_000.0, 100_000.0),
    ];
    let wide = Baseline::with_spread(&runs, Vec::new(), &other_vms, Vec::new()).expect("baseline");
    for (t, w) in tight.figures.iter().zip(&wide.figures) {
        assert_eq!(t.center, w.center, "{}", t.row);
        assert!(
            w.sd_log > t.sd_log && w.band >= t.band,
            "{}: {t:?} {w:?}",
            t.row
        );
        assert_eq!(w.spread_values.len(), 2);
    }
    // A run 17 % down on the zrecord row: a failure on the tight band, noise on the wide one.
    let down = run(4150.0, 40_000.0, 30_000.0, 100_000.0);
    assert_eq!(
        check(&tight, &down, false).len(),
        2,
        "both zrecord-raw figures"
    );
    assert!(check(&wide, &down, false).is_empty());
}

#[test]
fn wrong_failed_and_missing_rows_are_final() {
    let b = baseline();
    let now = run(5050.0, 40_500.0, 30_200.0, 100_500.0);
    let mut wrong = now.clone();
    wrong["tables"][0]["rows"][1]["verified"] = json!(false);
    let v = check(&b, &wrong, false);
    assert_eq!(v.len(), 1, "{v:?}");
    assert!(!v[0].speed && retry_tables(&v).is_empty());
    // loaderx's own loader row that did not run: no samples, no verdict.
    let mut crashed = now.clone();
    crashed["tables"][1]["rows"][2]["verified"] = Value::Null;
    crashed["tables"][1]["rows"][2]["samples/s"] = Value::Null;
    let v = check(&b, &crashed, false);
    assert_eq!(v.len(), 2, "unverified and its figure missing: {v:?}");
    assert!(v.iter().all(|x| !x.speed));
    // A row that is gone, and a table that is gone.
    let mut gone = now.clone();
    gone["tables"][1]["rows"]
        .as_array_mut()
        .expect("rows")
        .remove(1);
    // The bare gather gone: its own figure and the loader row's (divided by it) are missing.
    let v = check(&b, &gone, false);
    assert!(v.len() == 2 && v[0].msg.contains("bare-gather"), "{v:?}");
    assert!(v.iter().all(|x| !x.speed) && retry_tables(&v).is_empty());
    let mut no_table = now.clone();
    no_table["tables"].as_array_mut().expect("tables").remove(1);
    let v = check(&b, &no_table, false);
    assert!(v.len() == 1 && v[0].msg.contains("missing"), "{v:?}");
    // A confirmation run holds only the tables in question.
    assert!(check(&b, &no_table, true).is_empty());
    // A peer that did not run (not installed) is not a violation.
    let mut skipped = now.clone();
    skipped["tables"][1]["rows"][3]["samples/s"] = Value::Null;
    skipped["tables"][1]["rows"][3]["verified"] = Value::Null;
    assert!(check(&b, &skipped, false).is_empty());
}

#[test]
fn each_machine_kind_is_held_to_its_own_baseline() {
    let on = |cpu: &str, doc: Value| {
        let mut d = doc;
        d["machine"] = json!({"cpu": cpu, "logical_cpus": 2});
        d
    };
    let receipt = |cpu: &str| RunReceipt {
        path: String::new(),
        git_commit: None,
        git_dirty: Some(false),
        cpu: Some(cpu.to_string()),
        logical_cpus: Some(2),
    };
    let mut fast = baseline();
    fast.runs = vec![receipt("Fast CPU"); 3];
    let mut slow = Baseline::from_runs(
        &[
            run(2500.0, 20_000.0, 15_000.0, 100_000.0),
            run(2600.0, 20_500.0, 15_500.0, 101_000.0),
            run(2450.0, 19_500.0, 14_750.0, 99_000.0),
        ],
        Vec::new(),
    )
    .expect("baseline");
    slow.runs = vec![receipt("Slow CPU"); 3];
    assert_eq!(slow.kind().slug(), "slow-cpu-2cpu");
    let bases = [fast.clone(), slow.clone()];
    let half = run(2520.0, 20_200.0, 15_100.0, 100_500.0);
    // Half the fast kind's speed: a regression there (of the zrecord row and the bare gather; the
    // loader keeps its share of the gather), the norm on the slow kind.
    let (b, note) = pick(&bases, &on("Fast CPU", half.clone()));
    assert!(note.is_none() && b == fast);
    assert_eq!(check(&b, &on("Fast CPU", half.clone()), false).len(), 3);
    let (b, note) = pick(&bases, &on("Slow CPU", half.clone()));
    assert!(note.is_none() && b == slow);
    assert!(check(&b, &on("Slow CPU", half.clone()), false).is_empty());
    // An unknown kind: no speed rule, but the facts hold (a missing table still fails).
    let (b, note) = pick(&bases, &on("Other CPU", half.clone()));
    assert!(note.expect("says so").contains("Other CPU"));
    let slower = slowed(&half, 0.5, &|_, r| is_gated_row(r));
    assert!(check(&b, &on("Other CPU", slower), false).is_empty());
    let mut no_table = on("Other CPU", half);
    no_table["tables"].as_array_mut().expect("tables").remove(0);
    assert_eq!(check(&b, &no_table, false).len(), 1);
}

#[test]
fn a_figure_whose_band_misses_a_slowdown_from_its_highest_run_is_not_gated() {
    // 1.0, 1.0 and 1.16: the band (18 %) catches 25 % off the median but not off 1.16.
    let b = Baseline::from_runs(
        &[
            run(5000.0, 40_000.0, 30_000.0, 100_000.0),
            run(5000.0, 40_000.0, 30_000.0, 100_000.0),
            run(5000.0, 40_000.0, 34_800.0, 100_000.0),
        ],
        Vec::new(),
    )
    .expect("baseline");
    let gated: Vec<(&str, bool)> = b
        .figures
        .iter()
        .map(|f| (f.row.as_str(), f.gated))
        .collect();
    assert_eq!(
        gated,
        vec![
            ("zrecord-raw", true),
            ("zrecord-raw", true),
            ("bare-gather", false),
            ("python-loaderx-w4", true)
        ]
    );
}

#[test]
fn dense_image_loader_rows_are_read_over_the_copy_limit_too_and_token_rows_are_not() {
    let mut d = run(5000.0, 40_000.0, 30_000.0, 100_000.0);
    let ragged = d["tables"][1].clone();
    let mut tables = d["tables"].as_array().unwrap().clone();
    tables.push(json!({"name": "loader-dense-vision", "rows": ragged["rows"]}));
    d["tables"] = json!(tables);
    let has = |t: &str, m: &str| {
        figures(&d)
            .iter()
            .any(|f| f.table == t && f.row == "python-loaderx-w4" && f.metric == m)
    };
    assert!(has("loader-dense-vision", "x_bare") && has("loader-dense-vision", "x_limit"));
    assert!(has("loader-ragged-tokens", "x_bare") && !has("loader-ragged-tokens", "x_limit"));
    let f = figures(&d);
    let x = f
        .iter()
        .find(|f| {
            f.table == "loader-dense-vision"
                && f.row == "python-loaderx-w4"
                && f.metric == "x_limit"
        })
        .unwrap();
    assert_eq!(x.value, 40_000.0 / 100_000.0);
}

#[test]
fn repeats_taken_while_the_cores_sat_far_apart_count_only_when_no_other_did() {
    let b = baseline();
    let placed = |lx: [f64; 3], rt: [f64; 3]| {
        let mut d = run(5050.0, 40_500.0, 30_200.0, 100_500.0);
        d["tables"][1]["rows"][1]["samples/s repeats"] = json!([30_200.0]);
        d["tables"][1]["rows"][1]["core round trip ns repeats"] = json!([60.0]);
        d["tables"][1]["rows"][2]["samples/s repeats"] = json!(lx);
        d["tables"][1]["rows"][2]["core round trip ns repeats"] = json!(rt);
        d
    };
    let fig = |d: &Value| {
        figures(d)
            .into_iter()
            .find(|f| f.row == "python-loaderx-w4")
            .expect("figure")
    };
    // The far repeat (330 ns against the run's near level, 60) read faster, the near ones a
    // quarter slow: the near ones are the row's speed, and it fails.
    let d = placed([30_000.0, 60_000.0, 29_000.0], [65.0, 330.0, 70.0]);
    assert_eq!(fig(&d).value, 30_000.0 / 30_200.0);
    assert!(!fig(&d).far);
    let v = check(&b, &d, false);
    assert!(v.len() == 1 && v[0].speed, "{v:?}");
    // Every repeat far (a quarter slow there, as a 2-thread loader runs in that placement): the
    // figure is taken from them and marked far. A first run asks for the confirmation rerun (a
    // speed violation of its table); the confirmation (`partial`) does not judge it, and
    // `unjudged` says so.
    let d = placed([30_000.0, 30_500.0, 29_000.0], [330.0, 325.0, 340.0]);
    assert!(fig(&d).far);
    let v = check(&b, &d, false);
    assert!(
        v.len() == 1 && v[0].speed && v[0].msg.contains("far apart"),
        "{v:?}"
    );
    assert_eq!(retry_tables(&v), vec!["loader-ragged-tokens".to_string()]);
    assert!(check(&b, &d, true).is_empty());
    let u = unjudged(&b, &d);
    assert!(u.len() == 1 && u[0].contains("python-loaderx-w4"), "{u:?}");
    // Readings within 2.5x the near level are all near: the best of the three.
    let d = placed([40_500.0, 40_000.0, 39_000.0], [60.0, 140.0, 90.0]);
    assert!(!fig(&d).far && fig(&d).value == 40_500.0 / 30_200.0);
    assert!(check(&b, &d, false).is_empty() && unjudged(&b, &d).is_empty());
    // A baseline run that read a figure only while far gives it no value; with fewer than three
    // values left the figure is not gated.
    let runs = [
        placed([40_000.0; 3], [60.0; 3]),
        placed([40_000.0; 3], [330.0; 3]),
        placed([40_000.0; 3], [330.0; 3]),
    ];
    let base = Baseline::from_runs(&runs, Vec::new()).expect("baseline");
    let g = base
        .figures
        .iter()
        .find(|f| f.row == "python-loaderx-w4")
        .expect("figure");
    assert_eq!(g.values.len(), 1);
    assert!(!g.gated && g.note.as_deref().is_some_and(|n| n.contains("far apart")));
    // A run that sat far apart from first to last (every reading 330 ns, its own near level
    // with them): by its own level alone nothing is far and its loader row, a quarter slow there,
    // fails as a regression. The baseline keeps its runs' near level (60 ns), and by it the run
    // reads far: the first run asks for the confirmation, which leaves the figure unjudged.
    let near = Baseline::from_runs(
        &[
            placed([40_000.0; 3], [60.0; 3]),
            placed([40_200.0; 3], [65.0; 3]),
            placed([39_800.0; 3], [62.0; 3]),
        ],
        Vec::new(),
    )
    .expect("baseline");
    assert_eq!(near.near_ns, Some(60.0));
    let mut d = placed([30_000.0, 30_500.0, 29_000.0], [330.0, 325.0, 340.0]);
    d["tables"][1]["rows"][1]["core round trip ns repeats"] = json!([335.0]);
    assert!(!figures(&d).iter().any(|f| f.far));
    let alone = Baseline {
        near_ns: None,
        ..near.clone()
    };
    let v = check(&alone, &d, false);
    assert!(
        v.len() == 1 && v[0].msg.contains("below its floor"),
        "{v:?}"
    );
    assert!(
        figures_near(&d, near.near_ns)
            .iter()
            .all(|f| f.table != "loader-ragged-tokens" || f.far)
    );
    let v = check(&near, &d, false);
    assert!(
        v.iter().all(|x| x.speed && x.msg.contains("far apart")) && !v.is_empty(),
        "{v:?}"
    );
    assert!(check(&near, &d, true).is_empty());
    assert!(
        unjudged(&near, &d)
            .iter()
            .any(|u| u.contains("python-loaderx-w4"))
    );
}

#[test]
fn a_store_row_is_read_over_the_copy_limit_timed_beside_it() {
    let b = Baseline::from_runs(
        &[
            paired(0.5, [1.0, 1.0, 1.0]),
            paired(0.5, [1.02, 0.98, 1.0]),
            paired(0.5, [0.99, 1.0, 1.01]),
        ],
        Vec::new(),
    )
    .expect("baseline");
    let f = &b.figures[0];
    assert_eq!(
        (f.row.as_str(), f.metric.as_str()),
        ("zrecord-raw", "x_memcpy")
    );
    // The paired ratio (the median of the three): 0.5 s of limit over 0.5 s of gather, not the row over the limit
    // row (which `run` sets to 0.505).
    assert!((f.center - 1.0).abs() < 0.03, "{f:?}");
    let now = paired(0.5, [1.01, 0.97, 0.99]);
    assert!(check(&b, &now, false).is_empty());
    // Beside it, the row over the limit row, gated on its own spread.
    let rows = &b.figures[1];
    assert_eq!(rows.metric, "x_memcpy_rows");
    assert!((rows.center - 5050.0 / 10_000.0).abs() < 1e-9, "{rows:?}");
    // The row a quarter slower in every cell (its seconds up, the limit's beside it not): both
    // figures fail.
    let zr = |_: &str, r: &Value| text(r, "backend") == "zrecord-raw";
    let v = check(&b, &slowed(&now, SLOWER, &zr), false);
    assert!(v.len() == 2 && v.iter().all(|x| x.speed), "{v:?}");
    assert!(
        v[0].msg.contains("x_memcpy ") && v[1].msg.contains("x_memcpy_rows"),
        "{v:?}"
    );
    // A repeat without the limit beside it (an older cell): the row over the limit row.
    let mut old = now.clone();
    old["tables"][0]["rows"][0]["repeats"][0]
        .as_object_mut()
        .expect("repeat")
        .remove("limit_gather_s");
    let f = figures(&old);
    assert!((f[0].value - 5050.0 / 10_000.0).abs() < 1e-9, "{f:?}");
    assert!(
        f[1].metric == "x_memcpy_rows" && f[1].value == f[0].value,
        "{f:?}"
    );
}

/// A run whose zrecord-raw store cells each timed the copy limit beside their gathers: `gather_s`
/// seconds of the row's own gather against `limit` times that of the limit.
fn paired(gather_s: f64, limit: [f64; 3]) -> Value {
    let mut d = run(5050.0, 40_500.0, 30_200.0, 100_500.0);
    d["tables"][0]["rows"][0]["repeats"] = json!(
        limit
            .iter()
            .map(|l| json!({"gather_mib_s": 5050.0, "gather_s": gather_s, "limit_gather_s": gather_s * l, "status": "ok"}))
            .collect::<Vec<_>>()
    );
    d
}

#[test]
fn only_a_retaking_run_retakes_and_only_far_cells_of_rows_the_gate_reads() {
    benchkit::placement::settle(1);
    let far = Some(1e12);
    // A far reading (1e12 ns is past any near level) of a gated row is retaken in a quick or
    // gated run, wherever the machine gives readings at all.
    assert_eq!(
        retake_far(true, "zrecord-raw", far),
        benchkit::placement::near_level_seen().is_some()
    );
    // Not in a full (published) run, not for a row the gate does not read, not without a reading.
    assert!(!retake_far(false, "zrecord-raw", far));
    assert!(!retake_far(true, "lmdb-raw", far));
    assert!(!retake_far(true, "torch-dataloader-w4", far));
    assert!(!retake_far(true, "python-loaderx-w4", None));
}

/// A run whose loader table has an inline row (`loaderx-w0`) that timed the bare gather in its own
/// cell: `w0` and `bare` samples/s of its three repeats, each read at `rt` ns.
fn inline(w0: [f64; 3], bare: [f64; 3], rt: [f64; 3]) -> Value {
    let mut d = run(5050.0, 40_500.0, 30_200.0, 100_500.0);
    let mut row = json!({"arm": "loaderx-w0", "samples/s": w0[1], "samples/s repeats": w0,
        "core round trip ns repeats": rt, "verified": true});
    row[PAIRED_BARE] = json!(bare);
    d["tables"][1]["rows"]
        .as_array_mut()
        .expect("rows")
        .push(row);
    d
}

#[test]
fn an_inline_loader_row_is_read_over_the_bare_gather_timed_in_its_cell() {
    let fig = |d: &Value, row: &str, metric: &str| {
        figures(d)
            .into_iter()
            .find(|f| f.row == row && f.metric == metric)
    };
    // The median of the near repeats' ratios: the far one (330 ns) read 1.5 and does not count.
    let d = inline(
        [30_000.0, 45_000.0, 28_000.0],
        [31_000.0, 30_000.0, 29_000.0],
        [60.0, 330.0, 62.0],
    );
    let f = fig(&d, "loaderx-w0", "x_bare_paired").expect("paired figure");
    let want = (30_000.0 / 31_000.0 + 28_000.0 / 29_000.0) / 2.0;
    assert!((f.value - want).abs() < 1e-12 && !f.far, "{f:?}");
    // The row over the bare-gather row stays beside it; a row without pairs has no paired figure.
    assert!(fig(&d, "loaderx-w0", "x_bare").is_some());
    assert!(fig(&d, "python-loaderx-w4", "x_bare_paired").is_none());
    // Gated on its own spread: noise passes, the row a quarter slower fails, and the bare-gather
    // row a quarter slower does not move it (the gather is gated by its own figures).
    let b = Baseline::from_runs(
        &[
            inline([30_000.0; 3], [30_300.0; 3], [60.0; 3]),
            inline([29_500.0; 3], [30_000.0; 3], [60.0; 3]),
            inline([30_200.0; 3], [30_100.0; 3], [60.0; 3]),
        ],
        Vec::new(),
    )
    .expect("baseline");
    let g = b
        .figures
        .iter()
        .find(|f| f.metric == "x_bare_paired")
        .expect("baseline figure");
    assert!(g.gated, "{g:?}");
    let now = inline([29_800.0; 3], [30_100.0; 3], [60.0; 3]);
    assert!(check(&b, &now, false).is_empty());
    let w0 = |_: &str, r: &Value| text(r, "arm") == "loaderx-w0";
    let v = check(&b, &slowed(&now, SLOWER, &w0), false);
    assert!(v.iter().any(|x| x.msg.contains("x_bare_paired")), "{v:?}");
    let bare = |_: &str, r: &Value| text(r, "arm") == "bare-gather";
    let slow_bare = slowed(&now, SLOWER, &bare);
    let p = fig(&slow_bare, "loaderx-w0", "x_bare_paired").expect("paired figure");
    assert_eq!(
        p.value,
        fig(&now, "loaderx-w0", "x_bare_paired").unwrap().value
    );
}

#[test]
fn a_confirmation_fails_only_a_figure_two_judged_runs_put_below_its_floor() {
    let b = baseline();
    let ok = run(5050.0, 40_500.0, 30_200.0, 100_500.0);
    let lx = |_: &str, r: &Value| text(r, "arm") == "python-loaderx-w4";
    let slow = slowed(&ok, SLOWER, &lx);
    let now = || check(&b, &slow, true);
    assert_eq!(now().len(), 1, "{:?}", now());
    // Below its floor in the first run too: final.
    let s = confirm_split(&b, &slow, now(), false);
    assert!(s.last.len() == 1 && s.again.is_empty() && s.dropped.is_empty());
    // The first run judged it and it passed: below once in two judged runs, not failed.
    let s = confirm_split(&b, &ok, now(), false);
    assert!(s.last.is_empty() && s.again.is_empty() && s.dropped.len() == 1);
    // The first run read it only while the cores sat far apart: judged once, measured again; the
    // last confirmation does not fail a figure it judged alone.
    let mut far = ok.clone();
    far["tables"][1]["rows"][1]["samples/s repeats"] = json!([30_200.0]);
    far["tables"][1]["rows"][1]["core round trip ns repeats"] = json!([60.0]);
    far["tables"][1]["rows"][2]["samples/s repeats"] = json!([40_500.0]);
    far["tables"][1]["rows"][2]["core round trip ns repeats"] = json!([330.0]);
    let s = confirm_split(&b, &far, now(), false);
    assert!(s.last.is_empty() && s.again.len() == 1 && s.dropped.is_empty());
    let s = confirm_split(&b, &far, now(), true);
    assert!(s.last.is_empty() && s.again.is_empty() && s.dropped.len() == 1);
    // A fact is final whatever the first run said.
    let mut wrong = slow.clone();
    wrong["tables"][1]["rows"][2]["verified"] = json!(false);
    let s = confirm_split(&b, &ok, check(&b, &wrong, true), false);
    assert!(s.last.iter().any(|v| !v.speed), "{:?}", s.last);
}
