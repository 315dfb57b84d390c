//! Braille dot bits: a 2×4 cell of dots per character, the scatter's and the spectrum's pixels.

/// First code point of the Unicode braille block (U+2800, no dots raised).
pub(crate) const BRAILLE_BLANK: u32 = 0x2800;

/// Bit of the braille code point for the dot at column `dx` (0 = left, 1 = right) and row `dy`
/// (0 = top … 3 = bottom) of a 2×4 braille cell.
///
/// Unicode numbers the dots 1, 2, 3, 7 down the left column and 4, 5, 6, 8 down the right one;
/// dot *n* is bit *n − 1* of the offset from U+2800.
pub(crate) const fn braille_bit(dx: usize, dy: usize) -> u8 {
    const BITS: [[u8; 4]; 2] = [
        [0x01, 0x02, 0x04, 0x40], // dots 1, 2, 3, 7
        [0x08, 0x10, 0x20, 0x80], // dots 4, 5, 6, 8
    ];
    BITS[dx & 1][dy & 3]
}

/// The braille character with the given dot bits raised.
pub(crate) fn braille_char(bits: u8) -> char {
    // Every value in U+2800..=U+28FF is a valid scalar value, so this never falls back.
    char::from_u32(BRAILLE_BLANK + u32::from(bits)).unwrap_or(' ')
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn braille_bits_follow_unicode_dot_numbering() {
        // Left column top→bottom: dots 1, 2, 3, 7.
        assert_eq!(braille_char(braille_bit(0, 0)), '⠁'); // dot 1 = U+2801
        assert_eq!(braille_char(braille_bit(0, 1)), '⠂'); // dot 2 = U+2802
        assert_eq!(braille_char(braille_bit(0, 2)), '⠄'); // dot 3 = U+2804
        assert_eq!(braille_char(braille_bit(0, 3)), '⡀'); // dot 7 = U+2840
        // Right column top→bottom: dots 4, 5, 6, 8.
        assert_eq!(braille_char(braille_bit(1, 0)), '⠈'); // dot 4 = U+2808
        assert_eq!(braille_char(braille_bit(1, 1)), '⠐'); // dot 5 = U+2810
        assert_eq!(braille_char(braille_bit(1, 2)), '⠠'); // dot 6 = U+2820
        assert_eq!(braille_char(braille_bit(1, 3)), '⢀'); // dot 8 = U+2880
        let all = (0..2)
            .flat_map(|dx| (0..4).map(move |dy| braille_bit(dx, dy)))
            .fold(0u8, |a, b| a | b);
        assert_eq!(braille_char(all), '⣿');
    }
}
