//! Rank 0's view of a running job: a progress bar (epochs or time budget, loss, images/s,
//! ETA) when stderr is a terminal, else a plain log line every few seconds, which is
//! what a Slurm log wants.
//!
//! `tick` is called once per step or push. Between refreshes it only compares two
//! numbers and updates a moving average, so the hot path pays no allocation and no
//! system call; a refresh (at most every 0.2 s on a terminal, 10 s otherwise) formats.

use std::io::IsTerminal;

use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};

use crate::config::Config;
use crate::telemetry::pace::Slowest;

/// Seconds between refreshes of the bar.
const BAR_EVERY_S: f64 = 0.2;
/// Bar resolution: run progress in thousandths.
const BAR_LEN: u64 = 1000;
const TEMPLATE: &str = "{elapsed_precise} [{bar:30.cyan/blue}] {percent:>3}% {msg} ETA {eta}";

enum Output {
    Off,
    Bar(ProgressBar),
    Plain,
}

/// Progress of the run as seen from this rank.
pub struct Progress {
    out: Output,
    epochs: f64,
    budget_s: f64,
    samples_per_epoch: f64,
    /// Throughput's unit: images, or sentence pairs of a text run.
    unit: &'static str,
    every_s: f64,
    next_s: f64,
    /// Moving average of the loss (the last ~50 ticks weigh most).
    loss: f64,
}

/// The figures one refresh shows.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Figures {
    /// Share of the run done, 0..1 (epochs or time budget, whichever stops it first).
    pub done: f64,
    pub epoch: f64,
    pub loss: f64,
    pub images_per_s: f64,
    /// Seconds left at the rate so far; `None` before any progress.
    pub eta_s: Option<f64>,
    /// The slowest worker this rank serves, against its group's median (parameter-server
    /// modes; `None` elsewhere or before two workers have pushed).
    pub slowest: Option<Slowest>,
}

impl Progress {
    /// Shows progress when `show` (rank 0): a bar when stderr is a terminal, else plain
    /// log lines. `samples_per_epoch` turns epochs into images.
    pub fn new(cfg: &Config, samples_per_epoch: usize, show: bool) -> Progress {
        let out = if !show {
            Output::Off
        } else if std::io::stderr().is_terminal() {
            Output::Bar(bar())
        } else {
            Output::Plain
        };
        Progress::with_output(cfg, samples_per_epoch, out)
    }

    /// Plain log lines whatever stderr is (tests, and runs whose output is a file).
    pub fn plain(cfg: &Config, samples_per_epoch: usize) -> Progress {
        Progress::with_output(cfg, samples_per_epoch, Output::Plain)
    }

    fn with_output(cfg: &Config, samples_per_epoch: usize, out: Output) -> Progress {
        let every_s = match out {
            Output::Bar(_) => BAR_EVERY_S,
            _ => cfg.run.progress_every_s,
        };
        Progress {
            out,
            epochs: cfg.run.epochs,
            budget_s: cfg.run.time_budget_s,
            samples_per_epoch: samples_per_epoch as f64,
            unit: if cfg.data.dataset == crate::config::DatasetKind::Multi30k {
                "sent/s"
            } else {
                "img/s"
            },
            every_s,
            next_s: every_s,
            loss: f64::NAN,
        }
    }

    /// Records one step at `epoch` and `elapsed_s` seconds of training with `loss`;
    /// refreshes the display when its interval has passed.
    pub fn tick(&mut self, epoch: f64, elapsed_s: f64, loss: f32) {
        self.tick_with(epoch, elapsed_s, loss, || None);
    }

    /// [`Progress::tick`] that also names the slowest worker, which `slowest` finds only
    /// when the display refreshes (it sorts, so it stays off the per-push path).
    pub fn tick_with(
        &mut self,
        epoch: f64,
        elapsed_s: f64,
        loss: f32,
        slowest: impl FnOnce() -> Option<Slowest>,
    ) {
        if matches!(self.out, Output::Off) {
            return;
        }
        let l = f64::from(loss);
        self.loss = if self.loss.is_finite() {
            0.98 * self.loss + 0.02 * l
        } else {
            l
        };
        if elapsed_s < self.next_s {
            return;
        }
        while self.next_s <= elapsed_s {
            self.next_s += self.every_s;
        }
        let f = Figures {
            slowest: slowest(),
            ..self.figures(epoch, elapsed_s)
        };
        match &self.out {
            Output::Off => {}
            Output::Bar(b) => {
                b.set_position((f.done * BAR_LEN as f64) as u64);
                b.set_message(self.message(&f));
            }
            Output::Plain => log::info!("progress: {}", self.line(&f)),
        }
    }

    /// Clears the bar (its last state stays in the log lines that follow).
    pub fn finish(&mut self) {
        if let Output::Bar(b) = &self.out {
            b.finish_and_clear();
        }
    }

    /// What a refresh at `epoch`, `elapsed_s` shows.
    pub fn figures(&self, epoch: f64, elapsed_s: f64) -> Figures {
        let done = share(epoch, self.epochs)
            .max(share(elapsed_s, self.budget_s))
            .clamp(0.0, 1.0);
        Figures {
            done,
            epoch,
            loss: self.loss,
            images_per_s: epoch * self.samples_per_epoch / elapsed_s.max(1e-9),
            eta_s: (done > 0.0).then(|| elapsed_s * (1.0 - done) / done),
            slowest: None,
        }
    }

    fn limit(&self) -> String {
        if self.epochs > 0.0 {
            format!("/{}", self.epochs)
        } else {
            String::new()
        }
    }

    /// The bar's message: epoch, loss, throughput, and the slowest worker where known.
    fn message(&self, f: &Figures) -> String {
        let slowest = f.slowest.map_or_else(String::new, |s| {
            format!(
                ", slowest rank {} {:.2}x its group's median",
                s.rank, s.slowdown
            )
        });
        format!(
            "epoch {:.2}{} loss {:.4} {:.0} {}{slowest}",
            f.epoch,
            self.limit(),
            f.loss,
            f.images_per_s,
            self.unit
        )
    }

    /// A plain log line: all figures, ETA included.
    pub fn line(&self, f: &Figures) -> String {
        let eta = f.eta_s.map_or_else(|| "?".into(), |s| format!("{s:.0} s"));
        format!("{:.1}% {}, ETA {eta}", 100.0 * f.done, self.message(f))
    }
}

fn share(done: f64, limit: f64) -> f64 {
    if limit > 0.0 {
        done / limit
    } else {
        0.0
    }
}

fn bar() -> ProgressBar {
    let b = ProgressBar::with_draw_target(Some(BAR_LEN), ProgressDrawTarget::stderr_with_hz(5));
    // The template is a constant; a bad one would be a bug caught by the tests.
    if let Ok(style) = ProgressStyle::with_template(TEMPLATE) {
        b.set_style(style.progress_chars("=> "));
    }
    b
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cfg(epochs: f64, budget_s: f64) -> Config {
        let text = format!(
            "[data]\ndataset = \"synthetic\"\n[model]\nname = \"mlp\"\n\
             [run]\nepochs = {epochs:?}\ntime_budget_s = {budget_s:?}\n"
        );
        Config::from_str_with_overrides(&text, "test", &[]).unwrap()
    }

    #[test]
    fn figures_follow_whichever_limit_stops_the_run() {
        let c = cfg(2.0, 100.0);
        let p = Progress::plain(&c, 1000);
        let f = p.figures(0.5, 10.0);
        assert_eq!(f.done, 0.25);
        assert_eq!(f.done, c.run.progress(0.5, 10.0));
        assert_eq!(f.images_per_s, 50.0);
        assert_eq!(f.eta_s, Some(30.0));
        // The time budget is nearer: 80 of 100 s.
        assert_eq!(p.figures(0.5, 80.0).done, 0.8);
        assert_eq!(p.figures(0.0, 0.0).eta_s, None);
    }

    #[test]
    fn plain_line_says_share_epoch_loss_rate_and_eta() {
        let c = cfg(2.0, 0.0);
        let mut p = Progress::plain(&c, 1000);
        p.tick(0.5, 1.0, 0.75);
        let line = p.line(&p.figures(0.5, 10.0));
        assert_eq!(line, "25.0% epoch 0.50/2 loss 0.7500 50 img/s, ETA 30 s");
    }

    #[test]
    fn the_line_names_the_slowest_worker_when_known() {
        let c = cfg(2.0, 0.0);
        let p = Progress::plain(&c, 1000);
        let f = Figures {
            slowest: Some(Slowest {
                rank: 5,
                seconds: 0.3,
                slowdown: 2.5,
            }),
            ..p.figures(0.5, 10.0)
        };
        assert!(
            p.line(&f)
                .ends_with("img/s, slowest rank 5 2.50x its group's median, ETA 30 s"),
            "{}",
            p.line(&f)
        );
    }

    #[test]
    fn loss_is_a_moving_average() {
        let c = cfg(1.0, 0.0);
        let mut p = Progress::plain(&c, 10);
        p.tick(0.1, 0.1, 1.0);
        p.tick(0.2, 0.2, 2.0);
        assert!((p.figures(0.2, 0.2).loss - 1.02).abs() < 1e-9);
    }

    #[test]
    fn refreshes_wait_for_their_interval() {
        let c = cfg(1.0, 0.0);
        let mut p = Progress::plain(&c, 10);
        p.tick(0.1, 1.0, 1.0);
        assert_eq!(p.next_s, 10.0);
        p.tick(0.5, 25.0, 1.0);
        assert_eq!(p.next_s, 30.0);
    }

    #[test]
    fn the_bar_template_parses() {
        assert!(ProgressStyle::with_template(TEMPLATE).is_ok());
    }
}
