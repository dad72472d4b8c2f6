//! The run (`harness run`): corpora, every selected table in fresh processes with rotated arms,
//! then the report. Owns the store tables' loop over (repeat, table, backend) cells.

use std::collections::BTreeMap;
use std::process::ExitCode;

use crate::cell_args::{Cell, StoreCellArgs};
use crate::config::{self, RunArgs};
use crate::corpus::{self, Corpora};
use crate::error::{HarnessError, Result, write_file};
use crate::model::{CellResult, Report, Status};
use crate::progress::{Ledger, progress};
use crate::store::{self, sampler};
use crate::table::{Corpus, Table};
use crate::{convert, fleet, loader, machine, packing, report, scale, working_set};

/// Backends that the reference leaves out of the Ragged vision table when a batch takes > 1 s.
pub const SLOW_RAGGED_VISION: &[&str] = &["hdf5-gzip", "arrow-ipc-zstd", "parquet-zstd"];

fn today() -> String {
    let secs = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0);
    // Civil date from days since 1970-01-01 (proleptic Gregorian).
    let z = (secs / 86_400) as i64 + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + i64::from(m <= 2);
    format!("{y:04}-{m:02}-{d:02}")
}

pub fn main(a: RunArgs) -> Result<ExitCode> {
    let out = a.out.clone().unwrap_or_else(|| {
        let host = sysinfo::System::host_name().unwrap_or_else(|| "host".into());
        config::workspace_root().join("results").join(format!(
            "{}-{host}{}",
            today(),
            if a.quick { "-quick" } else { "" }
        ))
    });
    // The receipt is read before anything runs and again at the end: a run is publishable only
    // from a clean tree at one commit (`machine::seal`).
    let source_at_start = machine::source_info();
    std::fs::create_dir_all(&out).map_err(HarnessError::io("create", &out))?;
    let work = a.cache.join("work");
    std::fs::create_dir_all(&work).map_err(HarnessError::io("create", &work))?;
    let needs = |c: Corpus| {
        Table::ALL
            .into_iter()
            .any(|t| t.corpus() == Some(c) && a.selected(t))
    };
    let need_vision = needs(Corpus::Vision);
    let need_tokens = needs(Corpus::Tokens) || a.selected(Table::Packing);
    let mut corpora = Corpora::default();
    if need_vision {
        corpora.vision = Some(corpus::vision(&a)?);
    }
    if need_tokens {
        corpora.tokens = Some(corpus::tokens(&a)?);
    }
    // Quick: at least 1.5 s of gathers per cell. At 0.5 s (a 130 MiB ragged-vision batch takes
    // ~18 ms, so ~25 batches) three clean runs of one commit spread 14-25 % (sd of ln) on the
    // dense and token zrecord-raw x memcpy figures.
    let min_seconds = a.min_seconds.unwrap_or(if a.quick { 1.5 } else { 2.0 });
    let verify_batches = if a.quick { 10 } else { 100 };

    let mut report = Report::new(a.quick, a.repeats, corpora.describe());
    let tables: Vec<Table> = Table::STORE
        .into_iter()
        .filter(|&t| a.selected(t) && !a.cold_only)
        .collect();
    let backends: Vec<&str> = competitors::Backend::ALL.iter().map(|b| b.name()).collect();
    let cells = tables.len() * backends.len() * a.repeats;
    let mut results: BTreeMap<(Table, String), Vec<CellResult>> = BTreeMap::new();
    let (mut by_table, mut by_cell) = (Ledger::default(), Ledger::default());
    if cells > 0 {
        let pb = progress(cells as u64, "store cells");
        for rep in 0..a.repeats {
            for &table in &tables {
                let Some(prepared) = corpora.of(table) else {
                    continue;
                };
                let n = backends.len();
                for k in 0..n {
                    // Rotate the arm order every repeat so no backend always runs first or last.
                    let backend = backends[(k + rep) % n];
                    pb.set_prefix(format!("{table} / {backend} (repeat {})", rep + 1));
                    let cell_out = work.join(format!("cell-{table}-{backend}-{rep}.json"));
                    let args = StoreCellArgs {
                        table,
                        backend: backend.to_string(),
                        corpus: prepared.dir.clone(),
                        work: work.clone(),
                        out: cell_out,
                        min_seconds,
                        verify_batches,
                        seed: 1000 * rep as u64 + k as u64,
                        probe_seconds: (table == Table::RaggedVision
                            && SLOW_RAGGED_VISION.contains(&backend))
                        .then_some(1.0),
                    };
                    let t = std::time::Instant::now();
                    let failed = CellResult::new(table, backend, Status::Failed);
                    let r = store::spawn(args.argv(), &args.out, failed);
                    let secs = t.elapsed().as_secs_f64();
                    by_table.add(table.name(), secs);
                    by_cell.add(&format!("{table}/{backend}"), secs);
                    if r.status == Status::Failed {
                        pb.println(format!(
                            "FAILED {table} / {backend}: {}",
                            r.note.clone().unwrap_or_default()
                        ));
                    }
                    results
                        .entry((table, backend.to_string()))
                        .or_default()
                        .push(r);
                    pb.inc(1);
                }
            }
        }
        pb.finish_and_clear();
        eprintln!("{}", by_table.summary("store cells", tables.len()));
        eprintln!("{}", by_cell.summary("store cells", 8));
    }
    for &table in &tables {
        let synthetic = corpora.of(table).is_some_and(|p| p.synthetic);
        let rows: Vec<(String, Vec<CellResult>)> = competitors::Backend::ALL
            .iter()
            .filter_map(|b| {
                results
                    .remove(&(table, b.to_string()))
                    .map(|v| (b.to_string(), v))
            })
            .collect();
        let mut st = report::aggregate(table, synthetic, rows);
        st.captions.extend(
            corpora
                .of(table)
                .and_then(|p| corpus::caption(table, p, st.records)),
        );
        let logical = (st.logical_mib * (1 << 20) as f64) as u64;
        st.captions
            .push(working_set::caption(logical, benchkit::cache::llc_bytes()));
        st.captions
            .extend([store::WRITE_METHOD, store::LIMIT_METHOD].map(String::from));
        if st
            .rows
            .iter()
            .any(|r| r.backend == "npy-crc-limit" && r.status == Status::Ok)
        {
            st.captions.push(store::VERIFIED_COPY_LIMIT.to_string());
        }
        report.store_tables.push(st);
    }
    let mut cold_failed = 0;
    if a.cold {
        let (md, failed) = crate::cold::run(&a, &corpora, &work, &out)?;
        println!("{md}");
        cold_failed = failed;
        // cold.json holds the cells; the run's receipt (machine, source, publishable) beside it.
        let mut source = machine::source_info();
        machine::seal(&source_at_start, &mut source);
        let receipt = serde_json::json!({"machine": machine::receipts(), "source": source});
        let path = out.join("receipt.json");
        let text = serde_json::to_string_pretty(&receipt).map_err(HarnessError::BadOutput)?;
        write_file(&path, text + "\n")?;
    }
    if a.cold_only {
        if cold_failed > 0 {
            eprintln!("harness: {cold_failed} cold cell(s) FAILED");
        }
        return Ok(ExitCode::from(u8::from(cold_failed > 0)));
    }
    let mut phases = Ledger::default();
    if a.selected(Table::Sampler) {
        report
            .free
            .push(phases.time("sampler", || sampler::run(&a, &work))?);
    }
    if Table::LOADER.into_iter().any(|t| a.selected(t)) {
        report
            .free
            .extend(phases.time("loader tables", || loader::run(&a, &corpora, &work))?);
    }
    if a.selected(Table::Packing) {
        report
            .free
            .push(phases.time("packing", || packing::run(&a, &corpora, &work))?);
    }
    if a.selected(Table::Scale) {
        report
            .free
            .push(phases.time("scale", || scale::run(&a, &work))?);
    }
    if a.selected(Table::Fleet) {
        report
            .free
            .push(phases.time("fleet", || fleet::run(&a, &work))?);
    }
    if a.selected(Table::Convert) {
        report
            .free
            .push(phases.time("convert", || convert::run(&a, &work))?);
    }
    eprintln!(
        "{}",
        phases.summary(
            "sampler, loader, packing, scale, fleet and convert tables",
            6
        )
    );
    report.machine = machine::receipts();
    report.source = machine::source_info();
    machine::seal(&source_at_start, &mut report.source);
    let plots = if a.all_plots {
        report::PlotSet::All
    } else {
        report::PlotSet::Headline
    };
    let failed = report::write(&report, &out, plots)?;
    println!("{}", report::render_markdown(&report));
    println!("results: {}", out.display());
    let failed = failed + cold_failed;
    if failed > 0 {
        eprintln!("harness: {failed} cell(s) FAILED verification or errored");
    }
    Ok(ExitCode::from(u8::from(failed > 0)))
}
