//! The lottery's stream is standard ChaCha20, its shuffles are permutations, and over many
//! seeds every order of a small cohort is about equally likely.

use std::collections::HashMap;

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

use super::*;

#[test]
fn stream_is_standard_chacha20() {
    // ChaCha20 with an all-zero key and nonce, block 0: keystream 76 b8 e0 ad a0 f1 3d 90 …
    // (draft-agl-tls-chacha20poly1305, test vector 1).
    let mut stream = ChaCha20Rng::from_seed([0; 32]);
    assert_eq!(stream.next_u32(), 0xade0_b876);
    assert_eq!(stream.next_u32(), 0x903d_f1a0);
}

#[test]
fn shuffles_are_permutations_and_reproducible() {
    let mut seeds = StdRng::seed_from_u64(7);
    for n in [0, 1, 2, 5, 100] {
        let seed: Seed = seeds.r#gen();
        let order = shuffled_order(&seed, n);
        let mut sorted = order.clone();
        sorted.sort_unstable();
        assert_eq!(sorted, (0..n).collect::<Vec<_>>());
        assert_eq!(shuffled_order(&seed, n), order);
    }
}

#[test]
fn seeds_round_trip_through_hex() {
    let seed: Seed = StdRng::seed_from_u64(3).r#gen();
    let text = seed_to_hex(&seed);
    assert_eq!(text.len(), 64);
    assert_eq!(seed_from_hex(&text), Some(seed));
    assert_eq!(seed_from_hex("zz"), None);
    assert_eq!(seed_from_hex(&"g".repeat(64)), None);
}

/// Every byte value is written as its two lowercase digits, high digit first.
#[test]
fn seeds_are_written_as_lowercase_hex() {
    let mut seed: Seed = [0; 32];
    for (index, byte) in seed.iter_mut().enumerate() {
        *byte = u8::try_from(index * 8 + 7).expect("below 256");
    }
    assert_eq!(
        seed_to_hex(&seed),
        "070f171f272f373f474f575f676f777f878f979fa7afb7bfc7cfd7dfe7eff7ff"
    );
    for value in 0..=u8::MAX {
        let text = seed_to_hex(&[value; 32]);
        assert_eq!(text, format!("{value:02x}").repeat(32));
        assert_eq!(seed_from_hex(&text), Some([value; 32]));
    }
}

/// The upper `1 - alpha` quantile of chi-square with `df` degrees of freedom, by the
/// Wilson-Hilferty approximation (`z` the normal quantile).
fn chi_square_critical(df: f64, z: f64) -> f64 {
    let a = 2.0 / (9.0 * df);
    df * (1.0 - a + z * a.sqrt()).powi(3)
}

fn chi_square(counts: &HashMap<Vec<usize>, u64>, cells: usize, draws: u64) -> f64 {
    let expected = draws as f64 / cells as f64;
    let seen: f64 = counts
        .values()
        .map(|&count| (count as f64 - expected).powi(2) / expected)
        .sum();
    // Cells never seen contribute `expected` each.
    seen + (cells - counts.len()) as f64 * expected
}

/// z for alpha = 0.001 (upper tail).
const Z_999: f64 = 3.0902;

#[test]
fn every_order_of_six_is_equally_likely() {
    let draws = 36_000u64;
    let mut seeds = StdRng::seed_from_u64(2026);
    let mut orders: HashMap<Vec<usize>, u64> = HashMap::new();
    let mut first_places: HashMap<Vec<usize>, u64> = HashMap::new();
    for _ in 0..draws {
        let seed: Seed = seeds.r#gen();
        let order = shuffled_order(&seed, 6);
        *first_places.entry(vec![order[0]]).or_default() += 1;
        *orders.entry(order).or_default() += 1;
    }
    assert_eq!(orders.len(), 720, "every one of the 720 orders comes up");
    let statistic = chi_square(&orders, 720, draws);
    let critical = chi_square_critical(719.0, Z_999);
    assert!(
        statistic < critical,
        "orders: chi-square {statistic:.1} reaches the 0.1 % critical value {critical:.1}"
    );
    let statistic = chi_square(&first_places, 6, draws);
    // Chi-square with 5 degrees of freedom, 0.1 % upper tail.
    assert!(
        statistic < 20.515,
        "first places: chi-square {statistic:.2} reaches the 0.1 % critical value 20.515"
    );
}
