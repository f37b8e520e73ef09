//! The machine the other benches ran on: what a dependent memory load costs at each working-set size,
//! and how well two threads scale on work that touches no shared memory at all.
//!
//! Run: `cargo bench --bench machine` (plain harness: these are properties of the machine, not of
//! kquota). Read its output beside the engine's figures: the targets that are ratios (two threads
//! against one, a million entities against ten thousand) can be no better than the machine allows.
//!
//! - **Latency ladder.** A pointer chase through a random cyclic permutation of one pointer per
//!   64-byte line, over 256 KiB, 4 MiB, 16 MiB and 128 MiB. Every load depends on the previous one,
//!   so each figure is the latency of one load from wherever that working set lives (L2, L3, DRAM).
//!   The rounds are two seconds apart: on a virtual machine whose host shares its last-level cache
//!   with other guests, the 4 MiB figure moves between L3 and DRAM latency from round to round.
//! - **Two-thread scaling.** The same work on one thread, then on each of two threads at once, for
//!   three loops: `wide` (eight independent add chains: as many instructions per cycle as the core
//!   can issue), `narrow` (one dependent multiply chain: the core mostly idle) and `l1` (sums over a
//!   16 KiB table). A vCPU whose host core runs another guest's thread on its SMT sibling gives the
//!   wide loop less, and the narrow loop no less.

// A bench binary, not a library.
#![allow(missing_docs)]

use std::hint::black_box;
use std::thread;
use std::time::{Duration, Instant};

/// A random cyclic permutation over `bytes / 64` lines: `next[8 * i]` holds the index of the line
/// after line `i` (the other seven words of each line are unused padding).
fn permutation(bytes: usize, mut seed: u64) -> Vec<usize> {
    let lines = bytes / 64;
    let mut order: Vec<usize> = (0..lines).collect();
    for i in (1..lines).rev() {
        // xorshift64: deterministic, and good enough to defeat the prefetchers.
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        order.swap(i, (seed % (i as u64 + 1)) as usize);
    }
    let mut next = vec![0; lines * 8];
    for w in 0..lines {
        next[order[w] * 8] = order[(w + 1) % lines] * 8;
    }
    next
}

/// Nanoseconds per dependent load over `next`, after one pass to warm it.
fn chase(next: &[usize], hops: usize) -> f64 {
    let mut at = 0;
    for _ in 0..next.len() / 8 {
        at = next[at];
    }
    let start = Instant::now();
    for _ in 0..hops {
        at = next[at];
    }
    black_box(at);
    start.elapsed().as_nanos() as f64 / hops as f64
}

/// A loop of `n` steps from a seed, returning something the optimizer cannot drop.
type Workload = fn(u64, u64) -> u64;

/// Eight independent chains of rotate, add and shift, kept in registers: as many instructions per
/// cycle as the core can issue. (Passing the lanes through `black_box` every step would put them on
/// the stack, and the loop would then measure store forwarding at whatever alignment the stack has.)
fn wide(seed: u64, n: u64) -> u64 {
    let mut v: [u64; 8] = std::array::from_fn(|i| seed + i as u64);
    for _ in 0..n {
        for (i, x) in v.iter_mut().enumerate() {
            *x = x.rotate_left(7).wrapping_add(i as u64 + 1) ^ (*x >> 3);
        }
    }
    v.iter().fold(0, |a, b| a ^ b)
}

/// One dependent multiply chain.
fn narrow(seed: u64, n: u64) -> u64 {
    let mut a = seed;
    for _ in 0..n {
        a = a.wrapping_mul(0xbf58_476d_1ce4_e5b9) ^ 1;
    }
    a
}

/// A 16 KiB table on a cache-line boundary, so that no load of it straddles two lines whatever
/// address the allocator returns.
#[repr(align(64))]
struct Table([u64; 2048]);

/// Sums over a 16 KiB table, four independent accumulators.
fn l1(seed: u64, n: u64) -> u64 {
    let mut table = Box::new(Table([0; 2048]));
    for (i, x) in table.0.iter_mut().enumerate() {
        *x = i as u64 * seed;
    }
    let mut sums = [0u64; 4];
    for round in 0..n / 2048 {
        for c in table.0.chunks_exact(4) {
            sums[0] = sums[0].wrapping_add(c[0]);
            sums[1] = sums[1].wrapping_add(c[1]);
            sums[2] = sums[2].wrapping_add(c[2] ^ round);
            sums[3] = sums[3].wrapping_add(c[3]);
        }
        sums = black_box(sums);
    }
    sums.iter().fold(0, |a, b| a.wrapping_add(*b))
}

/// The time of `f` on one thread, then of `f` on each of two threads at once: `(one, two, scaling)`.
fn scaling(f: Workload, n: u64) -> (Duration, Duration, f64) {
    black_box(f(black_box(1), n / 10));
    let start = Instant::now();
    black_box(f(black_box(1), n));
    let one = start.elapsed();
    let start = Instant::now();
    thread::scope(|s| {
        let other = s.spawn(move || black_box(f(black_box(2), n)));
        black_box(f(black_box(3), n));
        other.join().expect("second thread");
    });
    let two = start.elapsed();
    (one, two, 2.0 * one.as_secs_f64() / two.as_secs_f64())
}

fn main() {
    // `cargo bench` passes `--bench`; `cargo test --benches` does not, and then one short round
    // checks that everything runs.
    let full = std::env::args().any(|a| a == "--bench");
    let (rounds, hops, work) = if full {
        (8, 2_000_000, 1)
    } else {
        (1, 20_000, 100)
    };
    let sizes = [256 << 10, 4 << 20, 16 << 20, 128 << 20];
    let tables: Vec<Vec<usize>> = sizes
        .iter()
        .map(|&bytes| permutation(bytes, 0x9e37_79b9_7f4a_7c15))
        .collect();
    println!("latency of a dependent load (ns), rounds 2 s apart");
    for round in 0..rounds {
        let cells: Vec<String> = sizes
            .iter()
            .zip(&tables)
            .map(|(bytes, next)| format!("{} KiB {:6.1}", bytes >> 10, chase(next, hops)))
            .collect();
        println!("  round {round}: {}", cells.join(" | "));
        if round + 1 < rounds {
            thread::sleep(Duration::from_secs(2));
        }
    }
    println!();
    println!("two-thread scaling (the same work on each thread; 2.00x is perfect)");
    let loops: [(&str, Workload, u64); 3] = [
        ("wide", wide, 200_000_000),
        ("narrow", narrow, 300_000_000),
        ("l1", l1, 2_000_000_000),
    ];
    for round in 0..rounds.min(4) {
        for (name, f, n) in loops {
            let (one, two, ratio) = scaling(f, n / work);
            println!("  round {round}: {name:6} 1 thread {one:>9.2?}, 2 threads {two:>9.2?}: {ratio:.2}x");
        }
    }
}
