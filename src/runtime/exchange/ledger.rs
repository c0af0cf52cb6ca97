//! The end-of-run check of the exchange: every update a group sent, summed (in f64) in the
//! one place an exchange counts as sent, so that after the final flush each replica can be
//! compared with the initial weights plus everything every group sent. A group's own
//! changes reach its replica directly, not through what it sent, so anything the error
//! feedback or a selection dropped shows up as a difference.

use super::encoder::{Encoder, Taken};

/// What one group server has sent, and where its replica started.
pub struct Ledger {
    sent: Vec<f64>,
    initial: Vec<f32>,
}

impl Ledger {
    pub fn new(initial: &[f32]) -> Ledger {
        Ledger {
            sent: vec![0.0; initial.len()],
            initial: initial.to_vec(),
        }
    }

    /// Counts what `encoder` took as `taken` as sent: call it once the send succeeded.
    pub fn count(&mut self, taken: Taken, encoder: &Encoder) {
        match taken {
            Taken::Sparse => {
                for (&i, &v) in encoder.idx.iter().zip(&encoder.vals) {
                    self.sent[i as usize] += f64::from(v);
                }
            }
            Taken::Dense | Taken::LowRank => {
                for (t, &v) in self.sent.iter_mut().zip(&encoder.vals) {
                    *t += f64::from(v);
                }
            }
        }
    }

    /// What this group sent, in f32, to be summed over every group.
    pub fn sent(&self) -> Vec<f32> {
        self.sent.iter().map(|&x| x as f32).collect()
    }

    /// The largest |replica - initial - `all_sent`| and the largest |`all_sent`|: how far
    /// `replica` is from holding exactly what every group sent, against the size of it.
    pub fn error(&self, replica: &[f32], all_sent: &[f32]) -> (f64, f64) {
        let mut max_err = 0.0f64;
        let mut max_ref = 0.0f64;
        for ((&w, &i), &t) in replica.iter().zip(&self.initial).zip(all_sent) {
            max_err = max_err.max((f64::from(w - i) - f64::from(t)).abs());
            max_ref = max_ref.max(f64::from(t).abs());
        }
        (max_err, max_ref)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_replica_that_holds_everything_sent_has_no_error_and_one_that_drops_has() {
        let initial = [1.0, 2.0, 3.0];
        let mut encoder = Encoder::new(&initial, None, 1);
        let mut ledger = Ledger::new(&initial);
        let taken = encoder.take_sparse(&[1.0, 2.5, 3.0], 1).unwrap();
        ledger.count(taken, &encoder);
        let taken = encoder.take_dense(&[1.25, 2.5, 3.0]).unwrap();
        ledger.count(taken, &encoder);
        let sent = ledger.sent();
        assert_eq!(sent, [0.25, 0.5, 0.0]);
        assert_eq!(ledger.error(&[1.25, 2.5, 3.0], &sent), (0.0, 0.5));
        let (err, _) = ledger.error(&[1.25, 2.0, 3.0], &sent);
        assert_eq!(err, 0.5);
    }
}
