//! MDS: datasets written by `streaming.MDSWriter` (every encoding, with and
//! without zstd, hashes listed; two streams under a merged index; two
//! streams without one) read with the writer's values, every sample once,
//! in index order (tests/fixtures/mds/make.py, expected.json); `pil`
//! images decoded equal to PIL's pixels; `start_record` and `skip_to`;
//! `pkl` refused naming the column; damaged shards and indexes (a
//! truncated shard, a wrong sample count, flipped bytes) refused naming the
//! file.

use std::path::{Path, PathBuf};

use feedline::format::mds::MdsFormat;
use feedline::format::{Format, OpenOptions, Registry};
use feedline::plan::expand_inputs;
use feedline::{Chunk, DType, Dim};

mod format_helpers;
use format_helpers::{all_records, assert_contains, err_string};

fn fixture(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/mds")
        .join(name)
}

fn expected(name: &str) -> Vec<serde_json::Value> {
    let all: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(fixture("expected.json")).unwrap()).unwrap();
    all[name].as_array().unwrap().clone()
}

fn specs(dir: &Path) -> Vec<String> {
    expand_inputs(&[dir.display().to_string()]).unwrap()
}

/// Every sample of every spec, in order, through the registry.
fn read_specs(specs: &[String]) -> Vec<serde_json::Value> {
    let reg = Registry::with_builtin();
    let mut out = Vec::new();
    for s in specs {
        let mut r = reg.open(s, None, &OpenOptions::default()).unwrap();
        out.extend(all_records(r.as_mut()).iter().map(|r| r.to_json()));
    }
    out
}

/// `got` equals the writer's `want`; a `pil` value (a PNG) is decoded and
/// compared with PIL's pixels.
fn assert_samples(got: &[serde_json::Value], want: &[serde_json::Value], what: &str) {
    use base64::Engine;
    let b64 = base64::engine::general_purpose::STANDARD;
    assert_eq!(got.len(), want.len(), "{what}: sample count");
    for (i, (g, w)) in got.iter().zip(want).enumerate() {
        let (mut g, mut w) = (g.clone(), w.clone());
        if let Some(pil) = w.as_object_mut().unwrap().remove("pil") {
            let png = b64.decode(g["pil"][0].as_str().unwrap()).unwrap();
            let img = feedline_vision::decode(&png).unwrap();
            assert_eq!(
                img.width() as u64,
                pil["width"].as_u64().unwrap(),
                "{what} {i}"
            );
            assert_eq!(
                img.height() as u64,
                pil["height"].as_u64().unwrap(),
                "{what} {i}"
            );
            let rgb = b64.decode(pil["rgb"].as_str().unwrap()).unwrap();
            assert_eq!(img.pixels(), &rgb[..], "{what} {i}: pil pixels");
            g.as_object_mut().unwrap().remove("pil");
        }
        assert_eq!(g, w, "{what}: sample {i}");
    }
}

#[test]
fn every_encoding_reads_as_written_with_and_without_zstd() {
    for name in ["plain", "zstd"] {
        let s = specs(&fixture(name));
        assert_eq!(s.len(), 6, "{s:?}");
        assert!(s.iter().all(|x| x.starts_with("mds:")), "{s:?}");
        if name == "zstd" {
            assert!(s.iter().all(|x| x.ends_with(".mds.zstd")), "{s:?}");
        }
        assert_samples(&read_specs(&s), &expected(name), name);
    }
}

#[test]
fn the_mds_prefix_names_the_same_shards() {
    let dir = fixture("plain");
    let prefixed = expand_inputs(&[format!("mds:{}", dir.display())]).unwrap();
    assert_eq!(prefixed, specs(&dir));
    let msg = err_string(expand_inputs(&[format!(
        "mds:{}",
        Path::new(env!("CARGO_MANIFEST_DIR")).join("src").display()
    )]));
    assert_contains(&msg, &["no index.json", "not an MDS dataset"]);
}

#[test]
fn merged_and_nested_streams_read_as_one_dataset() {
    for name in ["merged", "nested"] {
        let s = specs(&fixture(name));
        assert_samples(&read_specs(&s), &expected(name), name);
    }
    assert_eq!(specs(&fixture("merged")).len(), 6);
    assert_eq!(specs(&fixture("nested")).len(), 2);
}

#[test]
fn start_record_and_skip_to_use_the_offset_table() {
    let want = expected("nested");
    let shard = fixture("nested/s1/shard.00000.mds");
    for start in 0..=3u64 {
        let opts = OpenOptions {
            start_record: start,
            ..OpenOptions::default()
        };
        let mut r = MdsFormat.open(&shard, &opts).unwrap();
        assert_eq!(r.len_hint(), Some(3));
        let got: Vec<_> = all_records(r.as_mut())
            .iter()
            .map(|r| r.to_json())
            .collect();
        assert_samples(&got, &want[3 + start as usize..], "nested s1");
    }
    let mut r = MdsFormat.open(&shard, &OpenOptions::default()).unwrap();
    r.skip_to(2).unwrap();
    assert_eq!(r.next_index(), 2);
    let rec = r.next_record().unwrap().unwrap();
    assert_eq!(rec.location.record, 2);
    assert_samples(&[rec.to_json()], &want[5..], "skip_to 2");
    r.skip_to(9).unwrap();
    assert!(r.next_record().unwrap().is_none());
}

#[test]
fn starting_past_a_bad_sample_or_skipping_it_does_not_decode_it() {
    // Sample 0's `s` made invalid UTF-8 (the index lists no hash): reading
    // it is a bad record; opening at 1, or skipping to 1, never decodes it.
    let dir = copy("nested");
    let shard = dir.path().join("s0/shard.00000.mds");
    let mut bytes = std::fs::read(&shard).unwrap();
    let text = "sample 0 \u{fc}".as_bytes();
    let at = bytes.windows(text.len()).position(|w| w == text).unwrap();
    bytes[at + text.len() - 2] = 0xff;
    std::fs::write(&shard, &bytes).unwrap();
    let mut r = MdsFormat.open(&shard, &OpenOptions::default()).unwrap();
    let msg = err_string(r.next_record());
    assert_contains(
        &msg,
        &["shard.00000.mds", "record 0", "field `s`", "not UTF-8"],
    );
    let want = expected("nested");
    let opts = OpenOptions {
        start_record: 1,
        ..OpenOptions::default()
    };
    let mut r = MdsFormat.open(&shard, &opts).unwrap();
    let got: Vec<_> = all_records(r.as_mut())
        .iter()
        .map(|r| r.to_json())
        .collect();
    assert_samples(&got, &want[1..3], "from 1");
    let mut r = MdsFormat.open(&shard, &OpenOptions::default()).unwrap();
    r.skip_to(1).unwrap();
    let got: Vec<_> = all_records(r.as_mut())
        .iter()
        .map(|r| r.to_json())
        .collect();
    assert_samples(&got, &want[1..3], "skipped to 1");
}

#[test]
fn the_schema_follows_the_encodings() {
    let reg = Registry::with_builtin();
    let spec = &specs(&fixture("plain"))[0];
    let s = reg.infer_schema(spec, None, 10).unwrap();
    let field = |n: &str| s.fields().iter().find(|f| f.name == n).unwrap().clone();
    for (name, dtype) in [
        ("i8", DType::I32),
        ("u8", DType::U8),
        ("u32", DType::I64),
        ("u64", DType::I64),
        ("f16", DType::F32),
        ("f64", DType::F64),
        ("s", DType::Bytes),
        ("j", DType::Bytes),
        ("jpg", DType::Bytes),
        ("arr_ts", DType::F32),
        ("arr", DType::F64),
    ] {
        assert_eq!(field(name).dtype, dtype, "{name}");
    }
    assert_eq!(field("arr_ts").shape.len(), 2);
}

#[test]
fn an_ndarray_of_open_shape_is_inferred_ragged_and_every_sample_fits() {
    // plain/: one sample a shard, `arr` (`ndarray`: float64 of shapes [n,
    // 2], n from 1 to 3) and `arr_t` (`ndarray:int16`: lengths 1 to 6). The
    // schema of the first shard must let every later sample in: its
    // leading dimension variable, the rest the first sample's.
    let reg = Registry::with_builtin();
    let all = specs(&fixture("plain"));
    let s = reg.infer_schema(&all[0], None, 10).unwrap();
    let field = |n: &str| s.fields().iter().find(|f| f.name == n).unwrap().clone();
    assert_eq!(
        (field("arr").dtype, field("arr").shape),
        (DType::F64, vec![Dim::Var, Dim::Fixed(2)])
    );
    assert_eq!(
        (field("arr_t").dtype, field("arr_t").shape),
        (DType::I32, vec![Dim::Var])
    );
    let want = expected("plain");
    let mut got = Vec::new();
    for spec in &all {
        let mut r = reg.open(spec, None, &OpenOptions::default()).unwrap();
        loop {
            let mut chunk = Chunk::new(&s);
            if r.read_chunk(&mut chunk, 4, usize::MAX).unwrap() == 0 {
                break;
            }
            for i in 0..chunk.len() {
                let row = chunk.row(i).unwrap().to_json();
                got.push(serde_json::json!({"arr": row["arr"], "arr_t": row["arr_t"]}));
            }
        }
    }
    let picked: Vec<_> = want
        .iter()
        .map(|w| serde_json::json!({"arr": w["arr"], "arr_t": w["arr_t"]}))
        .collect();
    assert_eq!(got, picked);
}

#[test]
fn a_pickle_column_is_refused_naming_it() {
    let s = specs(&fixture("pkl"));
    let reg = Registry::with_builtin();
    let msg = err_string(reg.open(&s[0], None, &OpenOptions::default()));
    assert_contains(
        &msg,
        &["shard.00000.mds", "column `obj`", "pkl", "runs code"],
    );
}

/// A copy of fixture directory `name` to damage.
fn copy(name: &str) -> tempfile::TempDir {
    fn walk(from: &Path, to: &Path) {
        std::fs::create_dir_all(to).unwrap();
        for e in std::fs::read_dir(from).unwrap() {
            let p = e.unwrap().path();
            let t = to.join(p.file_name().unwrap());
            if p.is_dir() {
                walk(&p, &t);
            } else {
                std::fs::copy(&p, &t).unwrap();
            }
        }
    }
    let dir = tempfile::tempdir().unwrap();
    walk(&fixture(name), dir.path());
    dir
}

fn open_err(spec: &str) -> String {
    err_string(Registry::with_builtin().open(spec, None, &OpenOptions::default()))
}

#[test]
fn a_truncated_shard_is_refused_naming_it() {
    for (name, shard) in [
        ("plain", "shard.00002.mds"),
        ("zstd", "shard.00002.mds.zstd"),
    ] {
        let dir = copy(name);
        let path = dir.path().join(shard);
        let bytes = std::fs::read(&path).unwrap();
        std::fs::write(&path, &bytes[..bytes.len() - 10]).unwrap();
        let msg = open_err(&format!("mds:{}", path.display()));
        assert_contains(
            &msg,
            &[&path.display().to_string(), "bytes, where the index says"],
        );
    }
}

#[test]
fn a_sample_count_that_disagrees_is_refused_naming_the_shard() {
    let dir = copy("nested");
    let index = dir.path().join("s0/index.json");
    let text = std::fs::read_to_string(&index).unwrap();
    assert!(text.contains("\"samples\": 3"), "{text}");
    std::fs::write(&index, text.replace("\"samples\": 3", "\"samples\": 4")).unwrap();
    let shard = dir.path().join("s0/shard.00000.mds");
    let msg = open_err(&format!("mds:{}", shard.display()));
    assert_contains(
        &msg,
        &[
            &shard.display().to_string(),
            "holds 3 samples, where the index says 4",
        ],
    );
}

#[test]
fn columns_that_disagree_with_the_shards_settings_are_refused_naming_the_shard() {
    let dir = copy("nested");
    let index = dir.path().join("s0/index.json");
    let text = std::fs::read_to_string(&index).unwrap();
    assert!(text.contains("\"u8\""), "{text}");
    std::fs::write(&index, text.replace("\"u8\"", "\"u9\"")).unwrap();
    let shard = dir.path().join("s0/shard.00000.mds");
    let msg = open_err(&format!("mds:{}", shard.display()));
    assert_contains(
        &msg,
        &[
            &shard.display().to_string(),
            "its settings name the columns",
            "u9",
        ],
    );
}

#[test]
fn a_flipped_byte_is_refused_by_the_listed_hash() {
    for (name, shard, algo) in [
        ("plain", "shard.00001.mds", "sha1"),
        ("zstd", "shard.00001.mds.zstd", "md5"),
    ] {
        let dir = copy(name);
        let path = dir.path().join(shard);
        let mut bytes = std::fs::read(&path).unwrap();
        let at = bytes.len() - 20;
        bytes[at] ^= 1;
        std::fs::write(&path, &bytes).unwrap();
        let msg = open_err(&format!("mds:{}", path.display()));
        assert_contains(
            &msg,
            &[&path.display().to_string(), &format!("its {algo} is")],
        );
        // With checksums off, an uncompressed shard opens (its bytes are
        // not hashed).
        if name == "plain" {
            let opts = OpenOptions {
                verify_checksums: false,
                ..OpenOptions::default()
            };
            assert!(MdsFormat.open(&path, &opts).is_ok());
        }
    }
}

#[test]
fn flipped_bytes_in_an_unhashed_shard_never_panic() {
    let dir = copy("nested");
    let path = dir.path().join("s0/shard.00000.mds");
    let bytes = std::fs::read(&path).unwrap();
    // The sample count and the first offset (which the writer's settings
    // after the table pin): every flip there is refused, naming the shard.
    for at in 0..8 {
        let mut b = bytes.clone();
        b[at] ^= 0x40;
        std::fs::write(&path, &b).unwrap();
        let msg = err_string(MdsFormat.open(&path, &OpenOptions::default()));
        assert!(msg.contains(&path.display().to_string()), "{at}: {msg}");
    }
    for at in 8..bytes.len() {
        let mut b = bytes.clone();
        b[at] ^= 0x40;
        std::fs::write(&path, &b).unwrap();
        let Ok(mut r) = MdsFormat.open(&path, &OpenOptions::default()) else {
            continue;
        };
        while let Some(x) = r.next_record().transpose() {
            if let Err(e) = x {
                assert!(e.to_string().contains("shard.00000.mds"), "{at}: {e}");
            }
        }
    }
}

#[test]
fn a_damaged_index_is_refused_naming_it() {
    let dir = copy("plain");
    let index = dir.path().join("index.json");
    std::fs::write(&index, b"{\"version\": 2, \"shards\": [").unwrap();
    let msg = err_string(expand_inputs(&[dir.path().display().to_string()]));
    assert_contains(&msg, &[&index.display().to_string(), "not JSON"]);
    std::fs::write(&index, b"{\"version\": 1, \"shards\": []}").unwrap();
    let msg = err_string(expand_inputs(&[dir.path().display().to_string()]));
    assert_contains(&msg, &[&index.display().to_string(), "index version 1"]);
    // A shard the index names but that is missing.
    let dir = copy("plain");
    std::fs::remove_file(dir.path().join("shard.00003.mds")).unwrap();
    let msg = err_string(expand_inputs(&[dir.path().display().to_string()]));
    assert_contains(&msg, &["index.json", "shard 3", "none of its files exists"]);
}
