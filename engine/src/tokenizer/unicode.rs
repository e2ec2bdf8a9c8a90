//! Code point classification for the pre-tokenizers: general-category flags (`\p{L}`,
//! `\p{N}`, ...), White_Space, simple lowercase, first code point of the canonical
//! decomposition, and GPT-2's byte <-> printable-character mapping.
//!
//! The tables (Unicode 15.1.0, the version llama.cpp's vocab code uses) live in the generated
//! `unicode_data.rs`; this file turns them into O(1) lookups built once per process.

use std::sync::OnceLock;

use super::unicode_data::{CATEGORY_RANGES, LOWERCASE, NFD_FIRST, WHITESPACE};

/// Highest code point + 1.
const MAX_CPT: usize = 0x11_0000;

/// Category and helper flags of one code point.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Flags(pub u16);

impl Flags {
    pub const UNDEFINED: u16 = 0x0001;
    pub const NUMBER: u16 = 0x0002;
    pub const LETTER: u16 = 0x0004;
    pub const MARK: u16 = 0x0010;
    pub const PUNCT: u16 = 0x0020;
    pub const SYMBOL: u16 = 0x0040;
    pub const CONTROL: u16 = 0x0080;
    pub const WHITESPACE: u16 = 0x0100;

    /// Flags of a position outside the fragment being split (no bit set).
    pub const NONE: Flags = Flags(0);

    #[inline]
    pub fn is_letter(self) -> bool {
        self.0 & Self::LETTER != 0
    }
    #[inline]
    pub fn is_number(self) -> bool {
        self.0 & Self::NUMBER != 0
    }
    #[inline]
    pub fn is_whitespace(self) -> bool {
        self.0 & Self::WHITESPACE != 0
    }
    #[inline]
    pub fn is_mark(self) -> bool {
        self.0 & Self::MARK != 0
    }
    #[inline]
    pub fn is_punct(self) -> bool {
        self.0 & Self::PUNCT != 0
    }
    #[inline]
    pub fn is_symbol(self) -> bool {
        self.0 & Self::SYMBOL != 0
    }
    #[inline]
    pub fn is_control(self) -> bool {
        self.0 & Self::CONTROL != 0
    }
    /// True for any real code point (false only for [`Flags::NONE`]).
    #[inline]
    pub fn is_some(self) -> bool {
        self.0 != 0
    }
}

fn flag_table() -> &'static [u16] {
    static TABLE: OnceLock<Vec<u16>> = OnceLock::new();
    TABLE.get_or_init(|| {
        let mut t = vec![Flags::UNDEFINED; MAX_CPT];
        for (i, &(start, flag)) in CATEGORY_RANGES.iter().enumerate() {
            let end = CATEGORY_RANGES.get(i + 1).map_or(MAX_CPT, |r| r.0 as usize);
            if let Some(run) = t.get_mut(start as usize..end) {
                run.fill(u16::from(flag));
            }
        }
        for &c in WHITESPACE.iter() {
            if let Some(f) = t.get_mut(c as usize) {
                *f |= Flags::WHITESPACE;
            }
        }
        t
    })
}

/// Flags of a code point (undefined for values past U+10FFFF).
#[inline]
pub fn flags(cpt: u32) -> Flags {
    Flags(
        flag_table()
            .get(cpt as usize)
            .copied()
            .unwrap_or(Flags::UNDEFINED),
    )
}

/// Simple lowercase mapping (identity when there is none).
pub fn to_lower(cpt: u32) -> u32 {
    if cpt < 0x80 {
        return if (b'A' as u32..=b'Z' as u32).contains(&cpt) {
            cpt + 32
        } else {
            cpt
        };
    }
    match LOWERCASE.binary_search_by_key(&cpt, |p| p.0) {
        Ok(i) => LOWERCASE.get(i).map_or(cpt, |p| p.1),
        Err(_) => cpt,
    }
}

/// The first code point of `cpt`'s canonical decomposition (identity when it has none).
pub fn nfd_first(cpt: u32) -> u32 {
    if cpt < 0xC0 {
        return cpt;
    }
    let i = NFD_FIRST.partition_point(|r| r.0 <= cpt);
    match i.checked_sub(1).and_then(|i| NFD_FIRST.get(i)) {
        Some(&(first, last, to)) if first <= cpt && cpt <= last => to,
        _ => cpt,
    }
}

/// GPT-2's byte-level alphabet: every byte maps to a printable code point.
pub struct ByteMap {
    /// byte -> code point.
    pub to_char: [char; 256],
}

impl ByteMap {
    /// The mapping: printable Latin-1 bytes map to themselves, the others to U+0100.. in
    /// byte order.
    pub fn get() -> &'static ByteMap {
        static MAP: OnceLock<ByteMap> = OnceLock::new();
        MAP.get_or_init(|| {
            let mut to_char = ['\0'; 256];
            let mut next = 256u32;
            for (b, slot) in to_char.iter_mut().enumerate() {
                let printable = (0x21..=0x7E).contains(&b)
                    || (0xA1..=0xAC).contains(&b)
                    || (0xAE..=0xFF).contains(&b);
                let cpt = if printable {
                    b as u32
                } else {
                    next += 1;
                    next - 1
                };
                *slot = char::from_u32(cpt).unwrap_or('\0');
            }
            ByteMap { to_char }
        })
    }

    /// Byte for a byte-level code point, if it is one.
    pub fn to_byte(&self, c: char) -> Option<u8> {
        let cpt = c as u32;
        match cpt {
            0x21..=0x7E | 0xA1..=0xAC | 0xAE..=0xFF => Some(cpt as u8),
            0x100..=0x143 => self.to_char.iter().position(|&x| x == c).map(|b| b as u8),
            _ => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn categories_of_known_code_points() {
        assert!(flags('a' as u32).is_letter());
        assert!(flags('Z' as u32).is_letter());
        assert!(flags('5' as u32).is_number());
        assert!(flags('٣' as u32).is_number());
        assert!(flags('é' as u32).is_letter());
        assert!(flags('中' as u32).is_letter());
        assert!(flags(0x0301).is_mark());
        assert!(flags('!' as u32).is_punct());
        assert!(flags('$' as u32).is_symbol());
        assert!(flags('🦙' as u32).is_symbol());
        assert!(flags(' ' as u32).is_whitespace());
        assert!(flags('\n' as u32).is_whitespace() && flags('\n' as u32).is_control());
        assert!(flags(0x3000).is_whitespace());
        assert!(!flags(0x1C).is_whitespace());
        assert_eq!(flags(0x10FFFF).0, Flags::UNDEFINED);
        assert_eq!(flags(0x20_0000).0, Flags::UNDEFINED);
    }

    #[test]
    fn lowercase_and_nfd() {
        assert_eq!(to_lower('A' as u32), 'a' as u32);
        assert_eq!(to_lower('Ä' as u32), 'ä' as u32);
        assert_eq!(to_lower(0x130), 'i' as u32);
        assert_eq!(to_lower('a' as u32), 'a' as u32);
        assert_eq!(nfd_first('Ä' as u32), 'A' as u32);
        assert_eq!(nfd_first('é' as u32), 'e' as u32);
        assert_eq!(nfd_first('a' as u32), 'a' as u32);
        assert_eq!(nfd_first('中' as u32), '中' as u32);
    }

    #[test]
    fn byte_map_is_a_bijection() {
        let m = ByteMap::get();
        assert_eq!(m.to_char[b' ' as usize], 'Ġ');
        assert_eq!(m.to_char[b'\n' as usize], 'Ċ');
        assert_eq!(m.to_char[b'a' as usize], 'a');
        let mut seen = std::collections::HashSet::new();
        for b in 0..=255u8 {
            let c = m.to_char[b as usize];
            assert!(seen.insert(c));
            assert_eq!(m.to_byte(c), Some(b));
        }
        assert_eq!(m.to_byte(' '), None);
    }
}
