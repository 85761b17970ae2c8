//! The examples' report of a finished pipeline: records and speed, a table
//! per device (busy and waiting-for-data %), a table per stage, and the
//! bottleneck.

use std::time::Duration;

use feedline_actors::StatsSnapshot;

/// Print the report of `s`; `steps` are the simulated devices' step times.
pub fn print_report(s: &StatsSnapshot, steps: &[Duration]) {
    println!();
    println!(
        "{} records in {} batches, {} passes, {:.2} s: {:.0} records/s; first batch after {:.1} ms",
        s.readers.records,
        s.batches,
        s.passes_done,
        s.elapsed_s,
        s.readers.records_per_s,
        s.first_batch_s.unwrap_or(0.0) * 1e3
    );
    println!();
    println!("device  step ms  batches   records   busy %  waiting-for-data %");
    for (d, dev) in s.devices.iter().enumerate() {
        let total = (dev.busy_s + dev.waiting_s).max(1e-12);
        println!(
            "{:>6} {:>8.2} {:>8} {:>9} {:>8.1} {:>19.2}",
            d,
            steps.get(d).map_or(0.0, |t| t.as_secs_f64() * 1e3),
            dev.batches,
            dev.records,
            100.0 * dev.busy_s / total,
            100.0 * dev.waiting_s / total
        );
    }
    println!();
    println!("stage            records/s   busy %   idle %   blocked %");
    println!(
        "readers (×{})    {:>10.0} {:>8.1} {:>8.1} {:>11}",
        s.readers_count,
        s.readers.records_per_s,
        100.0 * s.readers.busy,
        100.0 * s.readers.idle,
        "-"
    );
    println!(
        "shuffle          {:>10.0} {:>8.1} {:>8.1} {:>11.1}",
        s.shuffle_batch.records_per_s,
        100.0 * s.shuffle_batch.busy,
        100.0 * s.shuffle_batch.idle,
        100.0 * s.shuffle_batch.blocked
    );
    println!(
        "batch maker (×{}) {:>9.0} {:>8.1} {:>8.1} {:>11.1}",
        s.batch_maker_workers,
        s.batch_maker.records_per_s,
        100.0 * s.batch_maker.busy,
        100.0 * s.batch_maker.idle,
        100.0 * s.batch_maker.blocked
    );
    println!(
        "feed queue       mean depth {:.2} of {} (0: devices starved; full: loader ahead)",
        s.feed_queue_mean_depth, s.feed_queue_capacity
    );
    println!();
    println!("bottleneck: {}", s.bottleneck);
}
