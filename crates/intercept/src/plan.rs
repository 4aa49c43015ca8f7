//! The arithmetic of the aarch64 engine, kept free of `unsafe` and of the architecture so that
//! it is unit-tested on every host: finding `svc #0` words, encoding branches, deciding whether
//! trampoline memory is within reach, and the per-site trampoline.

/// `svc #0`.
pub const SVC0: u32 = 0xd400_0001;
/// `stp x29, x30, [sp, #-16]!`
pub const PUSH_FP_LR: u32 = 0xa9bf_7bfd;
/// `ldp x29, x30, [sp], #16`
pub const POP_FP_LR: u32 = 0xa8c1_7bfd;
/// A `b`/`bl` reaches ±128 MiB (26-bit signed word offset).
pub const REACH: i64 = 1 << 27;
/// Bytes of one per-site trampoline ([`site_trampoline`]).
pub const SITE_BYTES: usize = 7 * 4;

/// Addresses of the 4-byte-aligned words equal to `svc #0` in `text`, which starts at `base`.
pub fn svc_words(text: &[u8], base: usize) -> Vec<usize> {
    let skip = (4 - base % 4) % 4;
    text.get(skip..)
        .unwrap_or_default()
        .chunks_exact(4)
        .enumerate()
        .filter(|(_, w)| u32::from_le_bytes([w[0], w[1], w[2], w[3]]) == SVC0)
        .map(|(i, _)| base + skip + 4 * i)
        .collect()
}

/// Encodes `b` (or `bl` with `link`) at `from` to `to`; `None` if out of reach or misaligned.
pub fn branch(from: usize, to: usize, link: bool) -> Option<u32> {
    let off = to as i64 - from as i64;
    if off % 4 != 0 || !(-REACH..REACH).contains(&off) {
        return None;
    }
    let imm26 = ((off >> 2) as u32) & 0x03ff_ffff;
    Some(if link { 0x9400_0000 } else { 0x1400_0000 } | imm26)
}

/// Whether trampolines occupying `[t_lo, t_hi)` can be reached from, and return to, every
/// site in `[lo, hi)`.
pub fn reachable(lo: usize, hi: usize, t_lo: usize, t_hi: usize) -> bool {
    // the farthest pair of points of two intervals is a pair of their opposite ends
    let far = (t_hi as i64 - lo as i64)
        .abs()
        .max((hi as i64 - t_lo as i64).abs());
    far + 8 < REACH
}

/// The code for the syscall site `site`, placed at `at`, calling the shared handler at
/// `common`. The handler returns to `at + 8` with the hook's result in x0, or to `at + 16`
/// with every register as it was, to run the syscall itself:
///
/// ```text
///  0  stp x29, x30, [sp, #-16]!   x30 is the caller's; keep it
///  4  bl  common                  saves all, calls the hook, restores all but x0
///  8  ldp x29, x30, [sp], #16     answered: x0 holds the result
/// 12  b   site + 4
/// 16  ldp x29, x30, [sp], #16     forwarded: registers and stack exactly as at the site
/// 20  svc #0                      (a clone child starts here on its own stack)
/// 24  b   site + 4
/// ```
pub fn site_trampoline(site: usize, at: usize, common: usize) -> Option<[u32; 7]> {
    Some([
        PUSH_FP_LR,
        branch(at + 4, common, true)?,
        POP_FP_LR,
        branch(at + 12, site + 4, false)?,
        POP_FP_LR,
        SVC0,
        branch(at + 24, site + 4, false)?,
    ])
}

/// Candidate start addresses for `size` bytes of trampolines near the code `[lo, hi)`, nearest
/// first, at least `min_distance` away (tests use a large one to force a refusal), on `page`
/// boundaries.
pub fn placements(
    lo: usize,
    hi: usize,
    size: usize,
    page: usize,
    min_distance: usize,
) -> Vec<usize> {
    let step = 1 << 20;
    let up = |a: usize| a.div_ceil(page) * page;
    let mut out = Vec::new();
    for k in 0..48 {
        let d = min_distance + k * step;
        if let Some(a) = hi.checked_add(d) {
            out.push(up(a));
        }
        if let Some(a) = lo.checked_sub(d + size + page) {
            out.push(a / page * page);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn finds_aligned_svc_words_only() {
        let mut text = vec![0u8; 64];
        text[8..12].copy_from_slice(&SVC0.to_le_bytes());
        text[30..34].copy_from_slice(&SVC0.to_le_bytes()); // misaligned: not an instruction
        text[60..64].copy_from_slice(&SVC0.to_le_bytes());
        assert_eq!(svc_words(&text, 0x1000), vec![0x1008, 0x103c]);
        // a base that is not word aligned: words start at the next aligned address
        assert_eq!(svc_words(&text[2..], 0x1002), vec![0x1008, 0x103c]);
    }

    #[test]
    fn branch_encodings() {
        assert_eq!(branch(0x1000, 0x1008, false), Some(0x1400_0002));
        assert_eq!(branch(0x1000, 0x0ffc, true), Some(0x97ff_ffff));
        assert_eq!(branch(0, (REACH - 4) as usize, false), Some(0x15ff_ffff));
        assert_eq!(branch(REACH as usize, 0, false), Some(0x1600_0000));
        assert_eq!(branch(0, REACH as usize, false), None);
        assert_eq!(branch(REACH as usize + 4, 0, false), None);
        assert_eq!(branch(0, 2, false), None);
    }

    #[test]
    fn reach_of_a_trampoline_block() {
        let (lo, hi) = (0x4000_0000, 0x4018_0000); // 1.5 MiB of libc text
        assert!(reachable(lo, hi, hi + 0x1000, hi + 0x9000));
        assert!(reachable(lo, hi, lo - 0x10_0000, lo - 0x8000));
        assert!(!reachable(
            lo,
            hi,
            hi + (REACH as usize),
            hi + (REACH as usize) + 0x1000
        ));
        assert!(!reachable(
            lo,
            hi,
            lo - (REACH as usize),
            lo - (REACH as usize) + 0x1000
        ));
        // every placement offered without a minimum distance is reachable
        for t in placements(lo, hi, 0x8000, 0x1000, 0).into_iter().take(20) {
            assert!(reachable(lo, hi, t, t + 0x8000), "{t:#x}");
        }
        // a minimum distance of 1 GiB leaves none within reach
        assert!(placements(lo, hi, 0x8000, 0x1000, 1 << 30)
            .into_iter()
            .all(|t| !reachable(lo, hi, t, t + 0x8000)));
    }

    #[test]
    fn per_site_trampoline() {
        let (site, at, common) = (0x4000_1234 & !3, 0x4100_0100, 0x4100_0000);
        let code = site_trampoline(site, at, common).unwrap();
        assert_eq!(code[0], PUSH_FP_LR);
        assert_eq!(code[1], branch(at + 4, common, true).unwrap());
        assert_eq!(code[1] >> 26, 0b100101); // bl
        assert_eq!(code[3], branch(at + 12, site + 4, false).unwrap());
        assert_eq!(code[5], SVC0);
        assert_eq!(code[6] >> 26, 0b000101); // b
        assert!(site_trampoline(site, site + (REACH as usize) + 64, common).is_none());
        assert_eq!(SITE_BYTES, code.len() * 4);
    }
}
