//! Trains the zstd dictionary of the batch codec (`agui_store::frame`) from
//! the generated corpus of `agui-testkit`, and prints how it compresses.
//!
//! ```sh
//! cargo run --release -p agui-store --example train_dictionary -- OUT.zdict [SIZE]
//! ```
//!
//! The shipped dictionary (`src/frame/agui-events-v1.zdict`) was made with
//! this command and the default size; it is part of the stored format and
//! never changes (see `src/frame/README.md`). The samples are typed frame
//! bodies of 1 to 64 events cut from every generator profile (seeds 0..40)
//! and from the mixed realistic stream of `agui-testkit` (not the store
//! benchmark's own `sample::realistic_run`, which the dictionary is
//! measured on).

use agui_protocol::Event;
use agui_testkit::{Profile, realistic, stream};

fn body(events: &[Event]) -> Vec<u8> {
    let mut b = Vec::new();
    for e in events {
        b.push(agui_store::frame::type_code(e.event_type()));
        b.extend_from_slice(&(e.len_bytes() as u32).to_le_bytes());
        b.extend_from_slice(e.json().as_bytes());
    }
    b
}

fn cut(events: &[Event], sizes: &[usize], out: &mut Vec<Vec<u8>>) {
    let mut at = 0;
    let mut k = 0;
    while at < events.len() {
        let n = sizes[k % sizes.len()].min(events.len() - at);
        out.push(body(&events[at..at + n]));
        at += n;
        k += 1;
    }
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let Some(path) = args.first() else {
        eprintln!("usage: train_dictionary OUT.zdict [SIZE]");
        std::process::exit(2);
    };
    let size: usize = args
        .get(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(16 * 1024);
    let sizes = [1, 3, 8, 2, 20, 5, 64, 1, 12];
    let mut samples = Vec::new();
    for profile in Profile::ALL {
        for seed in 0..40 {
            cut(&stream(*profile, seed), &sizes, &mut samples);
        }
    }
    cut(&realistic(100_000, 7), &sizes, &mut samples);
    let total: usize = samples.iter().map(Vec::len).sum();
    let dict = zstd::dict::from_samples(&samples, size).expect("training the dictionary");
    std::fs::write(path, &dict).expect("writing the dictionary");
    println!(
        "{} samples, {total} bytes; dictionary of {} bytes written to {path}",
        samples.len(),
        dict.len()
    );
}
