//! `.npy` writer/reader round trips and header validation.

use datasets::npy::{NpyFile, NpyWriter, write_npy};

#[test]
fn round_trip_and_layout() {
    let tmp = tempfile::tempdir().unwrap();
    let p = tmp.path().join("a.npy");
    let vals: Vec<u8> = (0..24i32).flat_map(|v| v.to_le_bytes()).collect();
    write_npy(&p, "<i4", &[2, 3, 4], &vals).unwrap();
    let raw = std::fs::read(&p).unwrap();
    assert_eq!(&raw[..8], b"\x93NUMPY\x01\x00");
    let hlen = u16::from_le_bytes([raw[8], raw[9]]) as usize;
    assert_eq!((10 + hlen) % 64, 0);
    let header = std::str::from_utf8(&raw[10..10 + hlen]).unwrap();
    assert_eq!(
        header.trim_end(),
        "{'descr': '<i4', 'fortran_order': False, 'shape': (2, 3, 4), }"
    );
    assert!(header.ends_with('\n'));
    let f = NpyFile::open(&p).unwrap();
    assert_eq!(f.descr(), "<i4");
    assert_eq!(f.shape(), &[2, 3, 4]);
    assert_eq!(f.data(), &vals[..]);
    assert_eq!(f.version(), (1, 0));
    assert_eq!(f.len(), 24);
    assert!(!tmp.path().join("a.npy.tmp").exists());
}

#[test]
fn one_d_and_growable() {
    let tmp = tempfile::tempdir().unwrap();
    let p = tmp.path().join("g.npy");
    let mut w = NpyWriter::create_growable(&p, "<u8", &[3]).unwrap();
    for i in 0..5u64 {
        for j in 0..3u64 {
            w.write(&(i * 10 + j).to_le_bytes()).unwrap();
        }
    }
    assert_eq!(w.finish().unwrap(), vec![5, 3]);
    let f = NpyFile::open(&p).unwrap();
    assert_eq!(f.shape(), &[5, 3]);
    assert_eq!(f.to_u64_vec().unwrap()[4 * 3 + 2], 42);

    let q = tmp.path().join("v.npy");
    let mut w = NpyWriter::create_growable(&q, "|u1", &[]).unwrap();
    w.write(&[1, 2, 3]).unwrap();
    w.finish().unwrap();
    let raw = std::fs::read(&q).unwrap();
    assert!(
        std::str::from_utf8(&raw[10..64])
            .unwrap()
            .contains("'shape': (3,)")
    );
    assert_eq!(NpyFile::open(&q).unwrap().data(), &[1, 2, 3]);

    let e = tmp.path().join("e.npy");
    write_npy(&e, "|u1", &[0, 3, 224, 224], &[]).unwrap();
    assert!(NpyFile::open(&e).unwrap().is_empty());
}

#[test]
fn size_mismatch_is_rejected() {
    let tmp = tempfile::tempdir().unwrap();
    let p = tmp.path().join("bad.npy");
    let err = write_npy(&p, "<i8", &[2], &[0u8; 15]).unwrap_err();
    assert!(
        matches!(
            err,
            datasets::Error::NpySize {
                expected: 16,
                found: 15,
                ..
            }
        ),
        "{err}"
    );
    assert!(!p.exists() && !tmp.path().join("bad.npy.tmp").exists());
    let mut w = NpyWriter::create_growable(&p, "<i4", &[2]).unwrap();
    w.write(&[0u8; 12]).unwrap();
    assert!(w.finish().is_err());
    let err = NpyWriter::create(&p, "|O", &[1]).unwrap_err();
    assert!(err.to_string().contains("'|O'"), "{err}");
}

fn file_with(tmp: &std::path::Path, name: &str, bytes: &[u8]) -> std::path::PathBuf {
    let p = tmp.join(name);
    std::fs::write(&p, bytes).unwrap();
    p
}

fn v2_or_v3(major: u8, dict: &str, payload: &[u8]) -> Vec<u8> {
    let mut d = dict.to_string();
    while !(12 + d.len() + 1).is_multiple_of(64) {
        d.push(' ');
    }
    d.push('\n');
    let mut out = b"\x93NUMPY".to_vec();
    out.extend_from_slice(&[major, 0]);
    out.extend_from_slice(&(d.len() as u32).to_le_bytes());
    out.extend_from_slice(d.as_bytes());
    out.extend_from_slice(payload);
    out
}

#[test]
fn versions_two_and_three_are_read() {
    let tmp = tempfile::tempdir().unwrap();
    for major in [2u8, 3] {
        let bytes = v2_or_v3(
            major,
            "{'descr': '<i8', 'fortran_order': False, 'shape': (2,), }",
            &[7u8; 16],
        );
        let p = file_with(tmp.path(), &format!("v{major}.npy"), &bytes);
        let f = NpyFile::open(&p).unwrap();
        assert_eq!(f.version(), (major, 0));
        assert_eq!(f.shape(), &[2]);
        assert_eq!(f.data(), &[7u8; 16]);
    }
}

#[test]
fn bad_headers_are_typed_errors() {
    let tmp = tempfile::tempdir().unwrap();
    let cases: Vec<(&str, Vec<u8>, &str)> = vec![
        ("magic", b"NOTNUMPYxxxxxxxx".to_vec(), "magic"),
        ("short", b"\x93NUM".to_vec(), "magic"),
        (
            "version",
            b"\x93NUMPY\x04\x00\x10\x00{}".to_vec(),
            "version",
        ),
        (
            "hlen",
            b"\x93NUMPY\x01\x00\xff\x00{'descr'".to_vec(),
            "header of 255 bytes",
        ),
        (
            "descr",
            v2_or_v3(
                2,
                "{'descr': '|O', 'fortran_order': False, 'shape': (1,), }",
                &[0; 8],
            ),
            "'|O'",
        ),
        (
            "shape",
            v2_or_v3(
                2,
                "{'descr': '<i4', 'fortran_order': False, 'shape': (x,), }",
                &[],
            ),
            "dimension",
        ),
        (
            "key",
            v2_or_v3(2, "{'descr': '<i4', 'fortran_order': False}", &[]),
            "shape",
        ),
        (
            "truncated",
            v2_or_v3(
                2,
                "{'descr': '<i4', 'fortran_order': False, 'shape': (4,), }",
                &[0; 8],
            ),
            "expected 16 bytes, found 8",
        ),
    ];
    for (name, bytes, needle) in cases {
        let p = file_with(tmp.path(), &format!("{name}.npy"), &bytes);
        let err = NpyFile::open(&p).unwrap_err();
        let msg = err.to_string();
        assert!(msg.contains(needle), "{name}: {msg}");
        assert!(msg.contains(&format!("{name}.npy")), "{name}: {msg}");
    }
}
