//! The batch maker: batches made side by side on the transform
//! workers, released in number order.
//!
//! - Deterministic mode gives the same batches — labels, origins and every
//!   pixel of real JPEGs through random crops and flips — whatever the
//!   worker count and the batches in flight.
//! - A worker does not wait for a batch's slowest row: while a row of one
//!   batch is held, rows of the next batches are made (an event, not a
//!   duration: the held row waits until a later batch's row has run).
//! - The batches held stay within the setting.
//! - A failed instance is judged in batch order: under the fail policy the
//!   error names the first bad record in delivery order, whatever the
//!   timing; under skip every good record comes exactly once.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use feedline::format::generator::Sample;
use feedline::format::tfrecord::TfRecordWriter;
use feedline::format::Compression;
use feedline::transform::TransformCtx;
use feedline::{BytesList, DType, Instance, Location, Record, Schema, SourceId, Tensor, Values};
use feedline_actors::{ErrorPolicy, Loader};
use feedline_vision::{ImageFields, ImageTransform, Plan};

/// A TFRecord of `n` JPEGs of different sizes (`image/encoded`), label
/// `i` (`image/class/label`); records in `bad` are JPEGs cut short.
fn jpegs(dir: &Path, n: usize, bad: &[usize]) -> PathBuf {
    let path = dir.join("images.tfrecord");
    let mut w = TfRecordWriter::new(std::fs::File::create(&path).unwrap(), Compression::None);
    for i in 0..n {
        let (width, height) = (24 + (i * 7) % 41, 20 + (i * 5) % 37);
        let pixels: Vec<u8> = (0..width * height * 3)
            .map(|p| ((p * 31 + i * 17 + (p / 3) * (p % 7)) % 256) as u8)
            .collect();
        let mut jpeg = Vec::new();
        jpeg_encoder::Encoder::new(&mut jpeg, 85)
            .encode(
                &pixels,
                width as u16,
                height as u16,
                jpeg_encoder::ColorType::Rgb,
            )
            .unwrap();
        if bad.contains(&i) {
            jpeg.truncate(jpeg.len() / 3);
        }
        w.write_example(&Record {
            fields: vec![
                (
                    "image/encoded".into(),
                    Tensor::vector(Values::Bytes(BytesList::from_iter([&jpeg[..]]))),
                ),
                (
                    "image/class/label".into(),
                    Tensor::vector(Values::I64(vec![i as i64])),
                ),
            ],
            location: Location::new(SourceId::intern("written"), i as u64, None),
        })
        .unwrap();
    }
    w.finish().unwrap();
    path
}

/// One delivered batch: pass, number, labels, and its pixels' bits.
type Made = (u64, u64, Vec<i64>, Vec<u32>);

/// The batches of a deterministic run with `workers` transform workers
/// and `in_flight` batches in flight.
fn run(path: &Path, workers: usize, in_flight: usize) -> Vec<Made> {
    let plan =
        Plan::parse("decode,random-resized-crop(12),flip(0.5),normalize(imagenet),chw").unwrap();
    let loader = Loader::builder()
        .files(path.to_str().unwrap())
        .transform(Arc::new(ImageTransform::new(plan, ImageFields::Detect)))
        .workers(workers)
        .batches_in_flight(in_flight)
        .deterministic(true)
        .seed(11)
        .shuffle(40)
        .batch(7)
        .passes(2)
        .readers(2)
        .chunk_records(9)
        .build()
        .unwrap();
    loader
        .into_iter()
        .map(|d| {
            let d = d.unwrap();
            let labels = d.batch.i64("image/class/label").unwrap();
            let image = (d.batch.schema().fields().iter())
                .find(|f| f.dtype == DType::F32)
                .expect("an f32 image field");
            let pixels = d.batch.f32(&image.name).unwrap();
            (
                d.pass,
                d.seq,
                labels.iter().copied().collect(),
                pixels.iter().map(|v| v.to_bits()).collect(),
            )
        })
        .collect()
}

#[test]
fn deterministic_batches_are_the_same_pixels_whatever_the_workers_and_batches_in_flight() {
    let dir = tempfile::tempdir().unwrap();
    let path = jpegs(dir.path(), 90, &[]);
    let want = run(&path, 1, 1);
    assert_eq!(want.len(), 2 * 90usize.div_ceil(7));
    // Each pass holds every image once.
    for pass in 0..2 {
        let labels: BTreeSet<i64> = (want.iter())
            .filter(|m| m.0 == pass)
            .flat_map(|m| m.2.clone())
            .collect();
        assert_eq!(labels, (0..90).collect::<BTreeSet<_>>(), "pass {pass}");
    }
    for (workers, in_flight) in [(2, 1), (3, 2), (5, 4), (8, 16), (4, 64)] {
        let got = run(&path, workers, in_flight);
        assert!(
            got == want,
            "{workers} workers, {in_flight} batches in flight: other batches"
        );
    }
}

/// How long the held row waits for a later batch's row before it gives up
/// (and says so): far longer than the few rows it waits for take.
const HOLD: Duration = Duration::from_secs(5);

/// An instance map that holds the row of record 0 until a row of a later
/// batch has been transformed (or [`HOLD`] has passed: then it says so).
struct HoldFirst {
    /// A row of a batch after record 0's was transformed.
    later_done: Arc<AtomicBool>,
    /// Record 0's row waited in vain.
    waited_in_vain: Arc<AtomicBool>,
    /// Batch size: records of batch k are k × batch.. (no shuffle).
    batch: u64,
}

impl HoldFirst {
    fn map(&self, inst: Instance, ctx: &mut TransformCtx) -> Result<Sample, String> {
        let record = ctx.origin.record;
        if record == 0 {
            let t0 = std::time::Instant::now();
            while !self.later_done.load(Ordering::SeqCst) {
                if t0.elapsed() > HOLD {
                    self.waited_in_vain.store(true, Ordering::SeqCst);
                    break;
                }
                std::thread::sleep(Duration::from_millis(1));
            }
        } else if record >= 2 * self.batch {
            self.later_done.store(true, Ordering::SeqCst);
        }
        let x = inst.get("x").map_err(|e| e.to_string())?.as_i64().unwrap()[0];
        Ok(Sample::new().with("x", Values::I64(vec![x]), []))
    }
}

fn hold_first_loader(in_flight: usize) -> (Loader, Arc<AtomicBool>) {
    let batch = 4u64;
    let hold = HoldFirst {
        later_done: Arc::new(AtomicBool::new(false)),
        waited_in_vain: Arc::new(AtomicBool::new(false)),
        batch,
    };
    let in_vain = hold.waited_in_vain.clone();
    let loader = Loader::builder()
        .generator("numbers", || {
            (0..64i64).map(|i| Sample::new().with("x", Values::I64(vec![i]), []))
        })
        .shuffle(0)
        .batch(batch as usize)
        .output_schema(
            Schema::builder()
                .field("x", DType::I64, [])
                .build()
                .unwrap(),
        )
        .map(move |inst, ctx| hold.map(inst, ctx))
        .workers(3)
        .batches_in_flight(in_flight)
        .build()
        .unwrap();
    (loader, in_vain)
}

#[test]
fn workers_go_on_with_later_batches_while_a_row_of_an_earlier_one_is_held() {
    // Record 0 (batch 0) is held until a row of batch 2 or later has been
    // transformed: that happens only if the batch maker makes later batches
    // while batch 0 waits for its slowest row. (With one batch in flight
    // it cannot: mutation checked, `batches_in_flight(1)` waits in vain.)
    let (loader, in_vain) = hold_first_loader(4);
    let xs: Vec<i64> = loader
        .into_iter()
        .flat_map(|d| {
            d.unwrap()
                .batch
                .i64("x")
                .unwrap()
                .iter()
                .copied()
                .collect::<Vec<_>>()
        })
        .collect();
    assert_eq!(xs, (0..64).collect::<Vec<_>>(), "in order, each once");
    assert!(
        !in_vain.load(Ordering::SeqCst),
        "no later batch was made while batch 0 waited"
    );
}

#[test]
fn one_batch_in_flight_makes_batches_one_at_a_time() {
    // The other side of the test above: with one batch in flight, batch 0's
    // held row waits in vain (it gives up after its timeout), and the
    // batches still come in order.
    let (loader, in_vain) = hold_first_loader(1);
    let xs: Vec<i64> = loader
        .into_iter()
        .flat_map(|d| {
            d.unwrap()
                .batch
                .i64("x")
                .unwrap()
                .iter()
                .copied()
                .collect::<Vec<_>>()
        })
        .collect();
    assert_eq!(xs, (0..64).collect::<Vec<_>>());
    assert!(in_vain.load(Ordering::SeqCst));
}

#[test]
fn the_batches_held_stay_within_the_batches_in_flight() {
    for in_flight in [1, 2, 5] {
        let busy = Arc::new(AtomicU64::new(0));
        let peak = Arc::new(AtomicU64::new(0));
        let (b, p) = (busy.clone(), peak.clone());
        let loader = Loader::builder()
            .generator("numbers", || {
                (0..400i64).map(|i| Sample::new().with("x", Values::I64(vec![i]), []))
            })
            .shuffle(0)
            .batch(5)
            .capacity(1)
            .map(move |inst: Instance, _ctx: &mut TransformCtx| {
                let now = b.fetch_add(1, Ordering::SeqCst) + 1;
                p.fetch_max(now, Ordering::SeqCst);
                std::thread::sleep(Duration::from_micros(200));
                b.fetch_sub(1, Ordering::SeqCst);
                let x = inst.get("x")?.as_i64().unwrap()[0];
                Ok::<_, Box<dyn std::error::Error + Send + Sync>>(Sample::new().with(
                    "x",
                    Values::I64(vec![x]),
                    [],
                ))
            })
            .workers(8)
            .batches_in_flight(in_flight)
            .build()
            .unwrap();
        let stats = loader.stats_handle();
        let mut n = 0;
        for d in loader {
            n += d.unwrap().batch.len();
            // A slow consumer: the batch maker fills what it may hold.
            std::thread::sleep(Duration::from_millis(1));
        }
        assert_eq!(n, 400);
        let held = stats.snapshot().made_waiting_peak;
        assert!(
            held <= in_flight as u64,
            "{held} batches held, {in_flight} in flight allowed"
        );
        // Rows being made at once: at most the batches in flight's rows.
        let rows = peak.load(Ordering::SeqCst);
        assert!(
            rows <= 5 * in_flight as u64,
            "{rows} rows made at once with {in_flight} batches of 5 in flight"
        );
    }
}

#[test]
fn the_first_bad_instance_in_batch_order_fails_the_run_whatever_the_timing() {
    let dir = tempfile::tempdir().unwrap();
    // Without shuffle, records come in order: 23 is the first bad one
    // delivered, whatever batch the workers finish first.
    let path = jpegs(dir.path(), 60, &[23, 24, 41, 58]);
    for (workers, in_flight) in [(1, 1), (4, 3), (8, 8)] {
        let seen = Arc::new(Mutex::new(Vec::new()));
        let loader = Loader::builder()
            .files(path.to_str().unwrap())
            .transform(Arc::new(ImageTransform::new(
                Plan::parse("decode,resize(8x8)").unwrap(),
                ImageFields::Detect,
            )))
            .workers(workers)
            .batches_in_flight(in_flight)
            .shuffle(0)
            .readers(1)
            .batch(4)
            .build()
            .unwrap();
        let mut error = None;
        for d in loader {
            match d {
                Ok(d) => (seen.lock().unwrap())
                    .extend(d.batch.i64("image/class/label").unwrap().iter().copied()),
                Err(e) => {
                    error = Some(e);
                    break;
                }
            }
        }
        let e = error.expect("a bad record fails the run");
        assert!(
            e.to_string().contains("record 23"),
            "{workers} workers, {in_flight} in flight: {e}"
        );
        let seen = seen.lock().unwrap();
        assert!(
            seen.iter().all(|&l| l < 20),
            "a batch after the bad one: {seen:?}"
        );
    }
}

#[test]
fn skipped_bad_instances_leave_every_good_record_once() {
    let dir = tempfile::tempdir().unwrap();
    let bad = [3usize, 17, 18, 44];
    let path = jpegs(dir.path(), 50, &bad);
    for (workers, in_flight) in [(2, 2), (6, 9)] {
        let loader = Loader::builder()
            .files(path.to_str().unwrap())
            .transform(Arc::new(ImageTransform::new(
                Plan::parse("decode,resize(8x8)").unwrap(),
                ImageFields::Detect,
            )))
            .workers(workers)
            .batches_in_flight(in_flight)
            .error_policy(ErrorPolicy::skip())
            .shuffle(20)
            .batch(6)
            .passes(2)
            .build()
            .unwrap();
        let stats = loader.stats_handle();
        let mut per_pass = vec![Vec::new(); 2];
        for d in loader {
            let d = d.unwrap();
            per_pass[d.pass as usize]
                .extend(d.batch.i64("image/class/label").unwrap().iter().copied());
        }
        let want: Vec<i64> = (0..50).filter(|i| !bad.contains(&(*i as usize))).collect();
        for (pass, got) in per_pass.iter_mut().enumerate() {
            got.sort_unstable();
            assert_eq!(*got, want, "pass {pass}");
        }
        let s = stats.snapshot();
        assert_eq!(s.bad_records, 2 * bad.len() as u64);
        let listed: BTreeSet<u64> = (stats.skipped().iter()).map(|r| r.record).collect();
        assert_eq!(listed, bad.iter().map(|&b| b as u64).collect());
    }
}
