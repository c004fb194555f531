//! DeBERTa-v2's relative positions: exact up to `bucket_size / 2`, logarithmic beyond, up to
//! `max_position` (`make_log_bucket_position`).

use super::RelativeTable;

/// DeBERTa's `make_log_bucket_position` for one relative position, in f32 as torch computes it.
pub fn log_bucket(rel: i64, bucket_size: usize, max_position: usize) -> i64 {
    let mid = (bucket_size / 2) as i64;
    let abs = if rel < mid && rel > -mid { mid - 1 } else { rel.abs() };
    if abs <= mid {
        return rel;
    }
    let ratio = ((max_position - 1) as f64 / mid as f64) as f32;
    let log = ((abs as f32 / mid as f32).ln() / ratio.ln() * (mid - 1) as f32).ceil() + mid as f32;
    log as i64 * rel.signum()
}

pub(super) fn delta(r: &RelativeTable, rel: i64) -> i64 {
    match r.log_buckets {
        Some((size, max)) => log_bucket(rel, size, max),
        None => rel,
    }
}

#[cfg(test)]
mod tests {
    use super::log_bucket;

    #[test]
    fn log_buckets_match_transformers() {
        // Printed by transformers' `make_log_bucket_position(torch.arange(-20, 21), 8, 32)`,
        // `(torch.arange(-300, 301, 37), 256, 512)` and `(torch.arange(-9, 10), 4, 16)`.
        let got: Vec<i64> = (-20..=20).map(|r| log_bucket(r, 8, 32)).collect();
        let want = [
            -7, -7, -7, -7, -7, -6, -6, -6, -6, -6, -6, -6, -6, -5, -5, -5, -4, -3, -2, -1, 0, 1, 2, 3, 4, 5, 5, 5, 6,
            6, 6, 6, 6, 6, 6, 6, 7, 7, 7, 7, 7,
        ];
        assert_eq!(got, want);
        let got: Vec<i64> = (-300..=300).step_by(37).map(|r| log_bucket(r, 256, 512)).collect();
        let want = [-207, -195, -181, -164, -144, -115, -78, -41, -4, 33, 70, 107, 139, 160, 177, 192, 204];
        assert_eq!(got, want);
        let got: Vec<i64> = (-9..=9).map(|r| log_bucket(r, 4, 16)).collect();
        assert_eq!(got, [-3, -3, -3, -3, -3, -3, -3, -2, -1, 0, 1, 2, 3, 3, 3, 3, 3, 3, 3]);
    }
}
