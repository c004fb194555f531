//! Which kernel adds the partial rows of a [`super::col_sum()`]: `norm/col_sum` (one thread per
//! column, a serial chain of loads) or `norm/col_sum_tiled` (a workgroup per 32 columns loading
//! tiles of 128 blocks into shared memory). Both add in increasing block order from zero: the
//! same bits, so the choice is a matter of speed alone, a pure function of the shape.

/// Columns per workgroup of `norm/col_sum_tiled` (`COLS` of its shader; tiles of `ROWS` = 128
/// blocks x 32 columns).
pub(crate) const TILE_COLS: u32 = crate::code::defines::norm_col_sum_tiled_f32::COLS;
/// Blocks at least for the tiled kernel: below, the serial chain is short anyway (split-K's
/// 2..16 splits).
const MIN_TILED_BLOCKS: u32 = 64;
/// Columns below which one thread per column leaves a large GPU mostly idle: 32,768 columns
/// are 128 workgroups of 256, about one per SM of an H200.
const MAX_TILED_COLS: u32 = 32_768;

/// The kernel of a [`super::col_sum()`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ColSum {
    /// `norm/col_sum`: one thread per column.
    Serial,
    /// `norm/col_sum_tiled`: 32 columns per workgroup, tiles of 128 blocks in shared memory.
    Tiled,
}

/// Tiled for many blocks of few columns (the norm backwards' 1024 x 2048), else serial.
/// `VKFORMERS_COL_SUM=serial` forces the serial kernel (an A/B of the two).
pub fn plan(blocks: u32, dim: u32) -> ColSum {
    if serial_forced() || blocks < MIN_TILED_BLOCKS || dim >= MAX_TILED_COLS {
        ColSum::Serial
    } else {
        ColSum::Tiled
    }
}

fn serial_forced() -> bool {
    static SERIAL: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *SERIAL.get_or_init(|| std::env::var("VKFORMERS_COL_SUM").is_ok_and(|v| v == "serial"))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every dtype's tiled kernel has the columns per workgroup the grid is sized by.
    #[test]
    fn tile_cols_are_the_shader_define() {
        for name in ["norm/col_sum_tiled:f32", "norm/col_sum_tiled:f16", "norm/col_sum_tiled:bf16"] {
            assert_eq!(crate::code::defines::value(name, "COLS"), Some(TILE_COLS), "{name}");
        }
    }

    #[test]
    fn norm_weight_gradients_are_tiled_and_split_k_stays_serial() {
        assert_eq!(plan(1024, 2048), ColSum::Tiled);
        assert_eq!(plan(256, 768), ColSum::Tiled);
        assert_eq!(plan(4, 2048 * 2048), ColSum::Serial);
        assert_eq!(plan(63, 100), ColSum::Serial);
        assert_eq!(plan(1024, 1 << 20), ColSum::Serial);
    }
}
