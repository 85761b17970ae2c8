//! A new user's program on the lean build (`feedline-actors` with
//! `default-features = false`): a TFRecord loop, then a Parquet path, a
//! `parquet:` prefix and an `s3://` URL, each refused with an error that
//! names the feature to enable.
//!
//! `new-user-lean DIR` writes two TFRecord files under `DIR/data/`, loads
//! them for two passes, and prints one line per check, which
//! actors/tests/new_user.rs looks for. Any mismatch is an error (exit 1).

use std::path::Path;

use feedline_actors::feedline::synthetic::{generate, GenOptions, Preset};
use feedline_actors::ndarray::{Ix1, Ix2};
use feedline_actors::prelude::*;

type Res<T = ()> = Result<T, Box<dyn std::error::Error>>;

fn main() -> Res {
    let dir = std::env::args().nth(1).ok_or("usage: new-user-lean DIR")?;
    let data = Path::new(&dir).join("data");
    std::fs::create_dir_all(&data)?;
    tfrecord_loop(&data)?;
    let table = data.join("table.parquet");
    std::fs::write(&table, b"PAR1")?;
    for (what, input) in [
        ("parquet path", table.to_string_lossy().into_owned()),
        ("parquet prefix", format!("parquet:{}", data.join("t.dat").display())),
    ] {
        let e = first_error(&input)?;
        expect(&e, "Parquet support is not compiled in: enable the `parquet` feature")?;
        println!("{what}: refused naming the feature");
    }
    let e = first_error("s3://bucket/train/shard-0.tfrecord")?;
    expect(&e, "enable the `remote` feature")?;
    println!("s3 url: refused naming the feature");
    Ok(())
}

/// Two generated TFRecord files, two passes, batches of 64.
fn tfrecord_loop(data: &Path) -> Res {
    let mut opts = GenOptions::new(Preset::Small, data);
    opts.files = Some(2);
    opts.records = Some(500);
    generate(&opts)?;
    let loader = Loader::builder()
        .files(data.join("*.tfrecord"))
        .shuffle(1000)
        .batch(64)
        .passes(2)
        .seed(7)
        .build()?;
    let (mut rows, mut batches) = (0, 0);
    for delivered in loader {
        let d = delivered?;
        let x = d.batch.view::<f32, Ix2>("x")?;
        let y = d.batch.view::<i64, Ix1>("y")?;
        if x.ncols() != 64 || y.len() != x.nrows() {
            return Err(format!("x {:?}, y {:?}", x.shape(), y.shape()).into());
        }
        rows += y.len();
        batches += 1;
    }
    println!("tfrecord: {rows} rows in {batches} batches");
    Ok(())
}

/// The error a loader over `input` gives: at build, or at its first batch.
fn first_error(input: &str) -> Res<String> {
    match Loader::builder().files(input).batch(8).build() {
        Err(e) => Ok(e.to_string()),
        Ok(loader) => match loader.into_iter().find_map(Result::err) {
            Some(e) => Ok(e.to_string()),
            None => Err(format!("{input}: read without an error").into()),
        },
    }
}

fn expect(error: &str, needle: &str) -> Res {
    if error.contains(needle) {
        Ok(())
    } else {
        Err(format!("`{needle}` not in the error: {error}").into())
    }
}
