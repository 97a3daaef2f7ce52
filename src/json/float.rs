//! Decimal → f64, correctly rounded, from the digits the reader already
//! scanned: the usual coordinate (up to 19 digits written, leading zeros
//! included, and no large exponent) never goes back to its text.

/// Exact powers of ten as f64 (10^22 is the largest).
const POW10: [f64; 23] = [
    1e0, 1e1, 1e2, 1e3, 1e4, 1e5, 1e6, 1e7, 1e8, 1e9, 1e10, 1e11, 1e12, 1e13, 1e14, 1e15, 1e16,
    1e17, 1e18, 1e19, 1e20, 1e21, 1e22,
];

/// The f64 nearest to `significand × 10^scale` (ties to even), when it can
/// be found without the text: `None` asks for the general algorithm.
/// A significand of more than 19 digits (wrapped) is never used.
pub fn from_decimal(significand: u64, digits: usize, scale: i64) -> Option<f64> {
    if digits > 19 {
        return None;
    }
    // Clinger's fast path: a significand and a power of ten that are both
    // exact in an f64 give the correctly rounded result in one operation.
    if significand < 1 << 53 && scale.unsigned_abs() <= 22 {
        let m = significand as f64;
        return Some(if scale >= 0 {
            m * POW10[scale as usize]
        } else {
            m / POW10[scale.unsigned_abs() as usize]
        });
    }
    // Longer significands with a fraction (what shortest-round-trip writers
    // such as ryu produce for most coordinates): divide exactly in integers.
    if (-19..=0).contains(&scale) {
        return Some(divided(significand, scale.unsigned_abs() as u32));
    }
    None
}

/// The f64 nearest to `w / 10^k` (ties to even), for `w >= 2^53` (smaller
/// ones take Clinger's path) and `k <= 19`.
fn divided(w: u64, k: u32) -> f64 {
    debug_assert!(w >= 1 << 53 && k <= 19);
    let d = u128::from(10u64.pow(k));
    // Shift w to fill all 128 bits: the quotient then has at least 64 bits
    // (d < 2^64), more than the 53 kept plus a rounding bit.
    let shift = 64 + w.leading_zeros();
    let n = u128::from(w) << shift;
    let q = n / d;
    let bits = 128 - q.leading_zeros();
    let dropped = bits - 54;
    let top = (q >> dropped) as u64; // 53 bits and the rounding bit
    let sticky = !n.is_multiple_of(d) || q & ((1u128 << dropped) - 1) != 0;
    let mut mantissa = top >> 1;
    if top & 1 == 1 && (sticky || mantissa & 1 == 1) {
        mantissa += 1;
    }
    // w / 10^k = n / d × 2^-shift ≈ q × 2^-shift, and q lies in [2^(bits-1), 2^bits).
    let mut exponent = i64::from(bits) - 1 - i64::from(shift);
    if mantissa == 1 << 53 {
        mantissa >>= 1;
        exponent += 1;
    }
    f64::from_bits(((exponent + 1023) as u64) << 52 | (mantissa & ((1 << 52) - 1)))
}

/// How many of the eight bytes of `x` (little-endian) are ASCII digits
/// before the first that is not, and their value: a run of digits is read
/// eight at a time, without a branch per digit.
#[inline]
pub fn leading_digits(x: u64) -> (usize, u64) {
    const HIGH: u64 = 0xF0F0_F0F0_F0F0_F0F0;
    const ZEROS: u64 = 0x3030_3030_3030_3030;
    // A digit byte is 0x30..=0x39: high nibble 3, and adding 6 leaves it 3.
    // (No byte of UTF-8 text is 0xFA or above, so no addition carries.)
    let nibbles = (x & HIGH) | ((x.wrapping_add(0x0606_0606_0606_0606) & HIGH) >> 4);
    let n = ((nibbles ^ 0x3333_3333_3333_3333).trailing_zeros() / 8) as usize;
    if n == 0 {
        return (0, 0);
    }
    // The digits moved to the top with '0's below them: the same value.
    let shift = 8 * (8 - n) as u32;
    let padded = if n == 8 {
        x
    } else {
        (x << shift) | (ZEROS >> (64 - shift))
    };
    // Pairs, then fours, then all eight, each step one multiplication.
    let v = padded - ZEROS;
    let v = v.wrapping_mul(10).wrapping_add(v >> 8);
    const MASK: u64 = 0x0000_00FF_0000_00FF;
    let v = (v & MASK)
        .wrapping_mul(100 + (1_000_000 << 32))
        .wrapping_add(((v >> 16) & MASK).wrapping_mul(1 + (10_000 << 32)))
        >> 32;
    (n, v)
}

/// 10^n for the `n` digits one step of [`leading_digits`] reads.
pub const SCALE: [u64; 9] = [
    1,
    10,
    100,
    1_000,
    10_000,
    100_000,
    1_000_000,
    10_000_000,
    100_000_000,
];

#[cfg(test)]
mod tests {
    use super::*;

    /// Decimal strings of every length up to 19 digits, with the point
    /// anywhere, against the standard library's parser.
    #[test]
    fn long_significands_round_like_the_standard_library() {
        let mut seed = 0x9E37_79B9_7F4A_7C15u64;
        let mut next = move || {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            seed
        };
        for _ in 0..300_000 {
            let digits = 1 + (next() % 19) as usize;
            let mut text: String = (0..digits)
                .map(|_| char::from(b'0' + (next() % 10) as u8))
                .collect();
            let point = (next() % (digits as u64 + 1)) as usize;
            let fraction = digits - point;
            text.insert(point, '.');
            let w: u64 = text.replace('.', "").parse().unwrap();
            let text = format!("0{text}0"); // "0.123", "0123.0": readable by std
            if let Some(v) = from_decimal(w, digits, -(fraction as i64)) {
                assert_eq!(v, text.parse::<f64>().unwrap(), "{text}");
            }
        }
        // Halfway cases and the rounding carry into the exponent.
        for text in [
            "9007199254740993",
            "9007199254740995",
            "1844674407370955.161",
            "9999999999999999999",
            "9.999999999999999999",
            "1.000000000000000111",
        ] {
            let w: u64 = text.replace('.', "").parse().unwrap();
            let scale = text.find('.').map_or(0, |p| -((text.len() - p - 1) as i64));
            let digits = text.len() - usize::from(text.contains('.'));
            assert_eq!(
                from_decimal(w, digits, scale),
                Some(text.parse().unwrap()),
                "{text}"
            );
        }
    }

    #[test]
    fn digits_eight_at_a_time() {
        let word = |s: &[u8; 8]| u64::from_le_bytes(*s);
        assert_eq!(leading_digits(word(b"12345678")), (8, 12_345_678));
        assert_eq!(leading_digits(word(b"00000009")), (8, 9));
        assert_eq!(leading_digits(word(b"99999999")), (8, 99_999_999));
        assert_eq!(leading_digits(word(b"1234567.")), (7, 1_234_567));
        assert_eq!(leading_digits(word(b"12.45678")), (2, 12));
        assert_eq!(leading_digits(word(b"9,\"a\":1}")), (1, 9));
        assert_eq!(leading_digits(word(b"-2345678")), (0, 0));
        assert_eq!(leading_digits(word(b"1234567:")), (7, 1_234_567));
        assert_eq!(leading_digits(word(b"/2345678")), (0, 0));
        assert_eq!(leading_digits(word(b"12\xc3\xa94567")), (2, 12));
    }
}
