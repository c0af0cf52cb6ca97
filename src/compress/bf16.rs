//! 16-bit messages between a worker and its server (`compression.push` and `compression.reply`).
//!
//! Each value of a push is rounded to bfloat16 (f32's sign, its 8 exponent bits and the top
//! 7 of its 23 mantissa bits; round to nearest, ties to even) and two of them travel in
//! one 32-bit word, so a push moves half the bytes of an f32 one. bfloat16 keeps f32's
//! range, so no gradient under- or overflows where its f32 did not; what it drops is
//! precision (a relative error up to 2^-8 per value). The worker keeps that error (error
//! feedback, as 1-bit SGD and DGC keep what they do not send): what rounding dropped from
//! one push is added to the next, so the sum of what a server received from a worker stays
//! within one rounding of the sum of what the worker computed, however many pushes.
//!
//! A non-finite value stays non-finite (a NaN stays a NaN, an infinity an infinity), so a
//! server's check of each push still refuses a diverged worker's. The server widens a push
//! back to f32 before it applies it: its apply and replies are the same as with f32 pushes.
//!
//! A server's replies may travel the same way (`compression.reply = "bf16"`,
//! [`pack_rounded`]): the worker then computes its gradient on weights rounded to bfloat16,
//! as mixed-precision training does, while the server keeps and updates them in f32, so no
//! rounding accumulates and nothing needs feeding back. ZeRO++ sends its weights quantized
//! for the same reason: the weights a step reads are the larger half of the traffic.
//!
//! Everything here is pure.

use thiserror::Error;

/// A packed push whose length is not the packing of the values expected.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
#[error("a 16-bit push of {words} words cannot hold {values} values (expected {expected} words)")]
pub struct PackedLength {
    pub words: usize,
    pub values: usize,
    pub expected: usize,
}

/// The 32-bit words that carry `values` bfloat16 values (the last word's upper half is
/// zero when `values` is odd).
pub fn words_for(values: usize) -> usize {
    values.div_ceil(2)
}

/// `x` rounded to bfloat16, as its 16 bits.
pub fn round(x: f32) -> u16 {
    let bits = x.to_bits();
    if x.is_nan() {
        // A quiet NaN of the same sign (the rounding below could carry a NaN's payload
        // into an infinity).
        return ((bits >> 16) as u16) | 0x0040;
    }
    let tie_to_even = (bits >> 16) & 1;
    (bits.wrapping_add(0x7fff + tie_to_even) >> 16) as u16
}

/// The f32 that bfloat16 bits `b` stand for (exact).
pub fn widen(b: u16) -> f32 {
    f32::from_bits(u32::from(b) << 16)
}

/// A worker's encoder of one range of its pushes, holding what rounding dropped so far.
#[derive(Debug, Clone, PartialEq)]
pub struct Encoder {
    residual: Vec<f32>,
}

impl Encoder {
    /// An encoder of pushes of `values` values, nothing dropped yet.
    pub fn new(values: usize) -> Encoder {
        Encoder {
            residual: vec![0.0; values],
        }
    }

    /// Packs `values` plus what earlier pushes dropped into `out` (resized to
    /// [`words_for`]`(values.len())`) and keeps what this rounding drops.
    ///
    /// # Panics
    /// If `values` is not as long as the encoder's pushes (a caller's bug).
    pub fn encode(&mut self, values: &[f32], out: &mut Vec<f32>) {
        assert_eq!(values.len(), self.residual.len(), "push length changed");
        out.clear();
        let mut pairs = values.chunks(2).zip(self.residual.chunks_mut(2));
        for (v, r) in &mut pairs {
            let mut halves = [0u16; 2];
            for k in 0..v.len() {
                let wanted = v[k] + r[k];
                halves[k] = round(wanted);
                r[k] = wanted - widen(halves[k]);
            }
            out.push(pack(halves));
        }
    }

    /// What rounding has dropped and the next push will carry.
    pub fn residual(&self) -> &[f32] {
        &self.residual
    }
}

/// Packs `values`, each rounded to bfloat16, into `out` (resized to
/// [`words_for`]`(values.len())`), nothing kept: a server's reply, whose weights the worker
/// computes on as mixed-precision training computes on rounded weights (the server keeps
/// them in f32).
pub fn pack_rounded(values: &[f32], out: &mut Vec<f32>) {
    out.clear();
    out.extend(values.chunks(2).map(|v| {
        let second = v.get(1).map_or(0, |&x| round(x));
        pack([round(v[0]), second])
    }));
}

/// Two bfloat16 values in one word: the first in the low half.
fn pack([lo, hi]: [u16; 2]) -> f32 {
    f32::from_bits(u32::from(lo) | (u32::from(hi) << 16))
}

/// Widens the packed push `words` into `out`, one value per entry of `out`.
pub fn decode(words: &[f32], out: &mut [f32]) -> Result<(), PackedLength> {
    let expected = words_for(out.len());
    if words.len() != expected {
        return Err(PackedLength {
            words: words.len(),
            values: out.len(),
            expected,
        });
    }
    for (pair, w) in out.chunks_mut(2).zip(words) {
        let bits = w.to_bits();
        pair[0] = widen(bits as u16);
        if let Some(second) = pair.get_mut(1) {
            *second = widen((bits >> 16) as u16);
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rounding_keeps_what_bfloat16_holds_and_breaks_ties_to_even() {
        for x in [0.0f32, -0.0, 1.0, -2.5, 3.0e38, 1.0e-38, f32::INFINITY] {
            let exact = widen((x.to_bits() >> 16) as u16);
            assert_eq!(widen(round(exact)).to_bits(), exact.to_bits(), "{x}");
        }
        // 1 + 2^-8 lies halfway between 1 and 1 + 2^-7: to the even one, 1.
        assert_eq!(widen(round(1.0 + 2f32.powi(-8))), 1.0);
        // 1 + 3 * 2^-8 lies halfway between 1 + 2^-7 and 1 + 2^-6: to the even, 1 + 2^-6.
        assert_eq!(widen(round(1.0 + 3.0 * 2f32.powi(-8))), 1.0 + 2f32.powi(-6));
        // Just above the half rounds up.
        assert_eq!(
            widen(round(1.0 + 2f32.powi(-8) + 2f32.powi(-20))),
            1.0 + 2f32.powi(-7)
        );
        // The relative error stays within 2^-8.
        for i in 1..2000 {
            let x = (i as f32 * 0.7310585).sin() * 10f32.powi(i % 30 - 15);
            let err = (widen(round(x)) - x).abs();
            assert!(err <= x.abs() * 2f32.powi(-8), "{x}: {err}");
        }
    }

    #[test]
    fn non_finite_values_stay_non_finite() {
        assert!(widen(round(f32::NAN)).is_nan());
        assert!(widen(round(-f32::NAN)).is_nan());
        // A NaN whose payload sits in the low half only must not become an infinity.
        assert!(widen(round(f32::from_bits(0x7f80_0001))).is_nan());
        assert_eq!(widen(round(f32::INFINITY)), f32::INFINITY);
        assert_eq!(widen(round(f32::NEG_INFINITY)), f32::NEG_INFINITY);
        // f32::MAX rounds past bfloat16's largest value: an infinity, as a cast would give.
        assert_eq!(widen(round(f32::MAX)), f32::INFINITY);
    }

    #[test]
    fn a_push_packs_two_values_a_word_and_decodes_to_their_rounding() {
        let values = [1.0f32, -0.375, 1.0e-20, 7.0e10, 0.1];
        let mut enc = Encoder::new(values.len());
        let mut words = Vec::new();
        enc.encode(&values, &mut words);
        assert_eq!(words.len(), 3);
        let mut out = [0.0f32; 5];
        decode(&words, &mut out).unwrap();
        for (o, v) in out.iter().zip(&values) {
            assert_eq!(*o, widen(round(*v)));
        }
        let dropped: Vec<f32> = values.iter().zip(&out).map(|(v, o)| v - o).collect();
        assert_eq!(enc.residual(), &dropped[..]);
        assert_eq!(
            decode(&words, &mut [0.0f32; 7]),
            Err(PackedLength {
                words: 3,
                values: 7,
                expected: 4
            })
        );
    }

    #[test]
    fn a_reply_packs_each_value_rounded_and_nothing_is_kept() {
        let values = [0.1f32, -3.0e-5, 12.0];
        let mut words = vec![7.0; 9];
        pack_rounded(&values, &mut words);
        assert_eq!(words.len(), 2);
        let mut out = [0.0f32; 3];
        decode(&words, &mut out).unwrap();
        let rounded: Vec<f32> = values.iter().map(|&v| widen(round(v))).collect();
        assert_eq!(out.to_vec(), rounded);
        assert_eq!(
            words[1].to_bits() >> 16,
            0,
            "the odd value's word has an empty upper half"
        );
    }

    /// Error feedback: after many pushes the server's sum is the worker's sum less what
    /// the encoder still holds, and that is one rounding of the last push at most.
    #[test]
    fn error_feedback_keeps_the_sum_of_pushes_within_one_rounding() {
        let n = 33;
        let mut enc = Encoder::new(n);
        let (mut sent, mut received) = (vec![0.0f64; n], vec![0.0f64; n]);
        let (mut words, mut out) = (Vec::new(), vec![0.0f32; n]);
        for step in 0..500 {
            // Small steady values beside large ones: without feedback, rounding 1 + 1e-3
            // would drop the 1e-3 every time.
            let g: Vec<f32> = (0..n)
                .map(|i| 1.0e-3 * (1 + i % 3) as f32 + (((step + i) % 2) as f32))
                .collect();
            enc.encode(&g, &mut words);
            decode(&words, &mut out).unwrap();
            for i in 0..n {
                sent[i] += f64::from(g[i]);
                received[i] += f64::from(out[i]);
            }
        }
        for i in 0..n {
            let held = f64::from(enc.residual()[i]);
            assert!(
                (sent[i] - received[i] - held).abs() < 1e-3,
                "value {i}: sent {} received {} held {held}",
                sent[i],
                received[i]
            );
            assert!(held.abs() <= 2.0 * 2f64.powi(-8), "value {i} holds {held}");
            // Without feedback each push would lose up to 2^-8 of 1.001..1.003: hundreds of
            // times more than what is left here.
            assert!((sent[i] - received[i]).abs() < 0.01, "value {i}");
        }
    }
}
