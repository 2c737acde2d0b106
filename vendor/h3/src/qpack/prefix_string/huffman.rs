//! gatehouse: a Huffman decoder for string literals (RFC 7541 §5.2, Appendix B, which RFC
//! 9204 §4.1.2 uses), a code at a time instead of `decode.rs`'s bit-window walk through
//! nested tables: that walk was 3.2% of h3-1k's CPU samples (perf, 2026-12-05).
//!
//! The code is canonical (`LIMITS` below were generated from `encode.rs`'s table and
//! checked to be), so the length of the next code is the first whose limit lies above the
//! next 32 bits, and its symbol is found by its distance from that length's first code.

use super::decode::Error;
use super::BitWindow;

/// Decodes `input`. Padding must be shorter than 8 bits and all ones, and EOS must not
/// appear (RFC 7541 §5.2); either is an error.
pub fn decode(input: &[u8]) -> Result<Vec<u8>, Error> {
    let mut out = Vec::with_capacity(input.len() * 8 / 5);
    // The next `bits` bits of the input, left-justified.
    let mut acc: u64 = 0;
    let mut bits: u32 = 0;
    let mut next = 0;
    loop {
        while bits <= 56 && next < input.len() {
            acc |= (input[next] as u64) << (56 - bits);
            bits += 8;
            next += 1;
        }
        if bits == 0 {
            return Ok(out);
        }
        // Past the input, ones: the start of EOS, as padding is.
        let window = (acc | u64::MAX.checked_shr(bits).unwrap_or(0)) >> 32;
        // Codes of up to 8 bits at once from `SHORT`, when as many bits are there.
        let short = SHORT[(window >> 24) as usize];
        if short != 0 && u32::from(short >> 8) <= bits {
            out.push(short as u8);
            acc <<= short >> 8;
            bits -= u32::from(short >> 8);
            continue;
        }
        let i = LIMITS.iter().position(|&l| window < l).unwrap_or(LIMITS.len() - 1);
        let len = LENGTHS[i];
        let at = || {
            let consumed = (next as u32) * 8 - bits;
            BitWindow {
                byte: consumed / 8,
                bit: consumed % 8,
                count: len,
            }
        };
        if len > bits {
            // Only the padding is left, or a code cut short.
            let rest = (acc >> (64 - bits)) as u32;
            if bits < 8 && rest == (1 << bits) - 1 {
                return Ok(out);
            }
            return Err(Error::MissingBits(at()));
        }
        let code = (window >> (32 - len)) as u32;
        let symbol = SYMBOLS[OFFSET[i] as usize + (code - FIRST[i]) as usize];
        if symbol > 255 {
            return Err(Error::Unhandled(at(), symbol as usize));
        }
        out.push(symbol as u8);
        acc <<= len;
        bits -= len;
    }
}

/// For each value of the next 8 bits, `len << 8 | symbol` if they begin with a code of
/// at most 8 bits (the digits, the lower-case letters and most of a path's and a host's
/// punctuation), else 0. Every such code's limit is a multiple of 2^24, so the 8 bits
/// decide it alone. h3-1k's three Huffman-coded request fields took 3,300 instructions
/// a request through the search of `LIMITS` alone.
const SHORT: [u16; 256] = short_codes();

const fn short_codes() -> [u16; 256] {
    let mut table = [0u16; 256];
    let mut b = 0;
    while b < 256 {
        let window = (b as u64) << 24;
        let mut i = 0;
        while window >= LIMITS[i] {
            i += 1;
        }
        let len = LENGTHS[i];
        if len <= 8 {
            let code = (window >> (32 - len)) as u32;
            let symbol = SYMBOLS[OFFSET[i] as usize + (code - FIRST[i]) as usize];
            table[b] = (len as u16) << 8 | symbol;
        }
        b += 1;
    }
    table
}

/// Code lengths of RFC 7541 Appendix B, shortest first.
const LENGTHS: [u32; 21] = [5, 6, 7, 8, 10, 11, 12, 13, 14, 15, 19, 20, 21, 22, 23, 24, 25, 26, 27, 28, 30];
/// Per length: one past its last code, left-justified in 32 bits (the code is canonical).
const LIMITS: [u64; 21] = [0x50000000, 0xb8000000, 0xf8000000, 0xfe000000, 0xff400000, 0xffa00000, 0xffc00000, 0xfff00000, 0xfff80000, 0xfffe0000, 0xfffe6000, 0xfffee000, 0xffff4800, 0xffffb000, 0xffffea00, 0xfffff600, 0xfffff800, 0xfffffbc0, 0xfffffe20, 0xfffffff0, 0x100000000];
/// Per length: its first code.
const FIRST: [u32; 21] = [0x0, 0x14, 0x5c, 0xf8, 0x3f8, 0x7fa, 0xffa, 0x1ff8, 0x3ffc, 0x7ffc, 0x7fff0, 0xfffe6, 0x1fffdc, 0x3fffd2, 0x7fffd8, 0xffffea, 0x1ffffec, 0x3ffffe0, 0x7ffffde, 0xfffffe2, 0x3ffffffc];
/// Per length: where its symbols start in `SYMBOLS`.
const OFFSET: [u16; 21] = [0, 10, 36, 68, 74, 79, 82, 84, 90, 92, 95, 98, 106, 119, 145, 174, 186, 190, 205, 224, 253];
/// The symbols by (code length, value); 256 is EOS.
const SYMBOLS: [u16; 257] = [48, 49, 50, 97, 99, 101, 105, 111, 115, 116, 32, 37, 45, 46, 47, 51, 52, 53, 54, 55, 56, 57, 61, 65, 95, 98, 100, 102, 103, 104, 108, 109, 110, 112, 114, 117, 58, 66, 67, 68, 69, 70, 71, 72, 73, 74, 75, 76, 77, 78, 79, 80, 81, 82, 83, 84, 85, 86, 87, 89, 106, 107, 113, 118, 119, 120, 121, 122, 38, 42, 44, 59, 88, 90, 33, 34, 40, 41, 63, 39, 43, 124, 35, 62, 0, 36, 64, 91, 93, 126, 94, 125, 60, 96, 123, 92, 195, 208, 128, 130, 131, 162, 184, 194, 224, 226, 153, 161, 167, 172, 176, 177, 179, 209, 216, 217, 227, 229, 230, 129, 132, 133, 134, 136, 146, 154, 156, 160, 163, 164, 169, 170, 173, 178, 181, 185, 186, 187, 189, 190, 196, 198, 228, 232, 233, 1, 135, 137, 138, 139, 140, 141, 143, 147, 149, 150, 151, 152, 155, 157, 158, 165, 166, 168, 174, 175, 180, 182, 183, 188, 191, 197, 231, 239, 9, 142, 144, 145, 148, 159, 171, 206, 215, 225, 236, 237, 199, 207, 234, 235, 192, 193, 200, 201, 202, 205, 210, 213, 218, 219, 238, 240, 242, 243, 255, 203, 204, 211, 212, 214, 221, 222, 223, 241, 244, 245, 246, 247, 248, 250, 251, 252, 253, 254, 2, 3, 4, 5, 6, 7, 8, 11, 12, 14, 15, 16, 17, 18, 19, 20, 21, 23, 24, 25, 26, 27, 28, 29, 30, 31, 127, 220, 249, 10, 13, 22, 256];
