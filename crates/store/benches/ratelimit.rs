//! Rate-limit decision benchmarks (placeholder while the backends are written).

fn main() {}
