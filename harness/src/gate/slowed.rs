//! A slower copy of a run (`harness gate-bite` and the gate's tests): every speed field of some
//! rows scaled down.

use serde_json::Value;

use super::figures::{num, text};

/// Scales every speed field of the rows `pick` selects by `factor` (a slower copy of a run: the
/// gate's bite test and `harness gate-bite`).
pub fn slowed(doc: &Value, factor: f64, pick: &dyn Fn(&str, &Value) -> bool) -> Value {
    const SPEED: [&str; 6] = [
        "gather_mib_s",
        "krecords_s",
        "x_memcpy",
        "samples/s",
        "batches/s",
        "krecords/s",
    ];
    let mut d = doc.clone();
    if let Some(ts) = d.get_mut("tables").and_then(Value::as_array_mut) {
        for t in ts {
            let name = text(t, "name").to_string();
            if let Some(rs) = t.get_mut("rows").and_then(Value::as_array_mut) {
                for r in rs.iter_mut().filter(|r| pick(&name, r)) {
                    scale(r, &SPEED, factor);
                    // The repeats too: the gate reads the best of them (`best_speed`).
                    if let Some(a) = r.get_mut("samples/s repeats").and_then(Value::as_array_mut) {
                        for x in a.iter_mut() {
                            if let Some(v) = x.as_f64() {
                                *x = Value::from(v * factor);
                            }
                        }
                    }
                    if let Some(a) = r.get_mut("repeats").and_then(Value::as_array_mut) {
                        for rep in a.iter_mut() {
                            scale(rep, &SPEED, factor);
                            // Its seconds for the batches the limit beside it copied too.
                            scale(rep, &["gather_s"], 1.0 / factor);
                        }
                    }
                }
            }
        }
    }
    d
}

fn scale(r: &mut Value, keys: &[&str], factor: f64) {
    for k in keys {
        if let Some(x) = num(r, k) {
            r[*k] = Value::from(x * factor);
        }
    }
}
