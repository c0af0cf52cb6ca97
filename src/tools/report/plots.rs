//! The report's pictures, each drawn once by backend-generic code and saved as PNG (for
//! slides and quick looks) and SVG (for papers). Text uses DejaVu Sans compiled into the
//! binary, so plotting needs no system fonts.

use std::path::{Path, PathBuf};
use std::sync::Once;

use anyhow::{anyhow, Result};
use plotters::coord::ranged1d::{AsRangedCoord, SegmentValue};
use plotters::coord::Shift;
use plotters::prelude::*;

use super::series::{Lane, Phase};

/// Pixel size of every picture.
pub const SIZE: (u32, u32) = (1280, 800);
const FONT: &str = "sans-serif";
const CAPTION: u32 = 34;
const AXIS_TITLE: u32 = 28;
const TICKS: u32 = 22;
const LEGEND: u32 = 22;

/// Colour-blind-safe palette (Tableau 10), one colour per run or group.
const PALETTE: [RGBColor; 10] = [
    RGBColor(31, 119, 180),
    RGBColor(255, 127, 14),
    RGBColor(44, 160, 44),
    RGBColor(214, 39, 40),
    RGBColor(148, 103, 189),
    RGBColor(140, 86, 75),
    RGBColor(227, 119, 194),
    RGBColor(127, 127, 127),
    RGBColor(188, 189, 34),
    RGBColor(23, 190, 207),
];

pub fn color(i: usize) -> RGBColor {
    PALETTE[i % PALETTE.len()]
}

static FONT_ONCE: Once = Once::new();

/// Makes the compiled-in font the one plotters draws "sans-serif" with.
fn register_font() {
    FONT_ONCE.call_once(|| {
        let bytes: &'static [u8] = include_bytes!("../../../assets/fonts/DejaVuSans.ttf");
        // The font is a fixed asset known to parse; a failure would show as missing text.
        let _ = plotters::style::register_font(FONT, FontStyle::Normal, bytes);
    });
}

type Drawn<DB> = Result<(), DrawingAreaErrorKind<<DB as DrawingBackend>::ErrorType>>;

/// A picture that can be drawn on any backend.
pub trait Figure {
    fn draw<DB: DrawingBackend>(&self, area: &DrawingArea<DB, Shift>) -> Drawn<DB>;
}

/// Draws `fig` into `dir/<stem>.png` and `dir/<stem>.svg`; returns both paths.
pub fn save<F: Figure>(fig: &F, dir: &Path, stem: &str) -> Result<[PathBuf; 2]> {
    save_sized(fig, dir, stem, SIZE)
}

/// [`save`] at `size` pixels (pictures of several panels).
pub fn save_sized<F: Figure>(
    fig: &F,
    dir: &Path,
    stem: &str,
    size: (u32, u32),
) -> Result<[PathBuf; 2]> {
    register_font();
    let png = dir.join(format!("{stem}.png"));
    let svg = dir.join(format!("{stem}.svg"));
    {
        let area = BitMapBackend::new(&png, size).into_drawing_area();
        fig.draw(&area)
            .and_then(|_| area.present())
            .map_err(|e| anyhow!("cannot draw {}: {e:?}", png.display()))?;
    }
    {
        let area = SVGBackend::new(&svg, size).into_drawing_area();
        fig.draw(&area)
            .and_then(|_| area.present())
            .map_err(|e| anyhow!("cannot draw {}: {e:?}", svg.display()))?;
    }
    Ok([png, svg])
}

/// Draws `fig` into the one file `path` at `size` pixels: a PNG where its name ends in
/// `.png`, else an SVG (a figure of the docs, where a second format beside it would be
/// clutter).
pub fn save_as<F: Figure>(fig: &F, path: &Path, size: (u32, u32)) -> Result<()> {
    register_font();
    let png = path
        .extension()
        .is_some_and(|e| e.eq_ignore_ascii_case("png"));
    let drawn = if png {
        let area = BitMapBackend::new(path, size).into_drawing_area();
        fig.draw(&area)
            .and_then(|_| area.present())
            .map_err(|e| format!("{e:?}"))
    } else {
        let area = SVGBackend::new(path, size).into_drawing_area();
        fig.draw(&area)
            .and_then(|_| area.present())
            .map_err(|e| format!("{e:?}"))
    };
    drawn.map_err(|e| anyhow!("cannot draw {}: {e}", path.display()))
}

/// White background, the caption, and the common axis styling.
type Chart<'a, DB, X, Y> = ChartContext<
    'a,
    DB,
    Cartesian2d<<X as AsRangedCoord>::CoordDescType, <Y as AsRangedCoord>::CoordDescType>,
>;

fn chart<'a, DB: DrawingBackend, X: AsRangedCoord, Y: AsRangedCoord>(
    area: &'a DrawingArea<DB, Shift>,
    caption: &str,
    x: X,
    y: Y,
) -> Result<Chart<'a, DB, X, Y>, DrawingAreaErrorKind<DB::ErrorType>> {
    chart_with(area, caption, x, y, 110)
}

/// `chart` with a y label area `y_labels` pixels wide (long category names).
fn chart_with<'a, DB: DrawingBackend, X: AsRangedCoord, Y: AsRangedCoord>(
    area: &'a DrawingArea<DB, Shift>,
    caption: &str,
    x: X,
    y: Y,
    y_labels: u32,
) -> Result<Chart<'a, DB, X, Y>, DrawingAreaErrorKind<DB::ErrorType>> {
    area.fill(&WHITE)?;
    ChartBuilder::on(area)
        .caption(caption, (FONT, CAPTION))
        .margin(24)
        .x_label_area_size(80)
        .y_label_area_size(y_labels)
        .build_cartesian_2d(x, y)
}

/// A tick label without trailing zeros (`10`, `2.5`, `0.25`).
pub fn tick(v: &f64) -> String {
    let s = format!("{v:.2}");
    let s = s.trim_end_matches('0').trim_end_matches('.');
    if s == "-0" {
        "0".into()
    } else {
        s.into()
    }
}

/// `n` categories as a segmented axis of exactly `n` slots (plotters' integer ranges
/// include their end).
fn slots(
    n: u32,
) -> plotters::coord::ranged1d::SegmentedCoord<plotters::coord::types::RangedCoordu32> {
    (0..n.max(2) - 1).into_segmented()
}

/// Common mesh style: light grid, axis titles and tick labels at readable sizes. Ticks
/// are 8 px: plotters sets labels twice the tick length off the axis, which keeps
/// ab_glyph text (drawn about a quarter of its size above its box) clear of the ticks.
macro_rules! mesh {
    ($chart:expr, $x:expr, $y:expr) => {
        $chart
            .configure_mesh()
            .x_desc($x)
            .y_desc($y)
            .axis_desc_style((FONT, AXIS_TITLE))
            .label_style((FONT, TICKS))
            .bold_line_style(RGBColor(215, 215, 215))
            .light_line_style(RGBColor(240, 240, 240))
            .set_all_tick_mark_size(8)
    };
}

fn legend<'a, DB: DrawingBackend + 'a, X: Ranged, Y: Ranged>(
    chart: &mut ChartContext<'a, DB, Cartesian2d<X, Y>>,
    position: SeriesLabelPosition,
) -> Drawn<DB> {
    chart
        .configure_series_labels()
        .position(position)
        .label_font((FONT, LEGEND))
        .background_style(WHITE.mix(0.9))
        .border_style(RGBColor(160, 160, 160))
        .margin(12)
        .draw()
}

/// Test accuracy (%) against wall time (s), a line per run, with the target accuracy.
pub struct AccuracyFigure {
    /// `(run name, [(time_s, accuracy 0..1)])`.
    pub runs: Vec<(String, Vec<(f64, f64)>)>,
    pub target: Option<f64>,
    pub caption: String,
}

impl Figure for AccuracyFigure {
    fn draw<DB: DrawingBackend>(&self, area: &DrawingArea<DB, Shift>) -> Drawn<DB> {
        let pts = self.runs.iter().flat_map(|(_, p)| p.iter());
        let t_max = pts.clone().map(|p| p.0).fold(1e-3, f64::max) * 1.02;
        let a_min = pts.map(|p| 100.0 * p.1).fold(100.0, f64::min);
        let y_lo = ((a_min - 5.0) / 5.0).floor().max(0.0) * 5.0;
        let mut c = chart(area, &self.caption, 0.0..t_max, y_lo..100.0)?;
        mesh!(c, "Wall time (s)", "Test accuracy (%)")
            .x_label_formatter(&tick)
            .y_label_formatter(&tick)
            .draw()?;
        if let Some(t) = self.target {
            let grey = RGBColor(110, 110, 110);
            c.draw_series(LineSeries::new(
                [(0.0, 100.0 * t), (t_max, 100.0 * t)],
                grey.stroke_width(2),
            ))?
            .label(format!("target {:.1} %", 100.0 * t))
            .legend(move |(x, y)| PathElement::new([(x, y), (x + 20, y)], grey.stroke_width(2)));
        }
        for (i, (name, p)) in self.runs.iter().enumerate() {
            let col = color(i);
            let line = p.iter().map(|&(t, a)| (t, 100.0 * a));
            c.draw_series(LineSeries::new(line.clone(), col.stroke_width(3)))?
                .label(name)
                .legend(move |(x, y)| PathElement::new([(x, y), (x + 20, y)], col.stroke_width(3)));
            c.draw_series(line.map(|q| Circle::new(q, 5, col.filled())))?;
        }
        legend(&mut c, SeriesLabelPosition::LowerRight)
    }
}

/// Several figures side by side, `columns` to a row (e.g. one accuracy panel per cluster
/// size).
pub struct PanelsFigure<F: Figure> {
    pub panels: Vec<F>,
    pub columns: usize,
}

impl<F: Figure> Figure for PanelsFigure<F> {
    fn draw<DB: DrawingBackend>(&self, area: &DrawingArea<DB, Shift>) -> Drawn<DB> {
        area.fill(&WHITE)?;
        let columns = self.columns.max(1);
        let rows = self.panels.len().div_ceil(columns).max(1);
        for (panel, sub) in self.panels.iter().zip(area.split_evenly((rows, columns))) {
            panel.draw(&sub)?;
        }
        Ok(())
    }
}

/// Val perplexity of text runs against wall time.
pub struct PerplexityFigure {
    /// `(run name, [(time_s, perplexity)])`.
    pub runs: Vec<(String, Vec<(f64, f64)>)>,
}

impl Figure for PerplexityFigure {
    fn draw<DB: DrawingBackend>(&self, area: &DrawingArea<DB, Shift>) -> Drawn<DB> {
        let pts = self.runs.iter().flat_map(|(_, p)| p.iter());
        let t_max = pts.clone().map(|p| p.0).fold(1e-3, f64::max) * 1.02;
        let lo = pts.clone().map(|p| p.1).fold(f64::INFINITY, f64::min);
        let hi = pts.map(|p| p.1).fold(0.0, f64::max);
        // The first evaluations of an untrained model are in the thousands: the axis
        // shows the range where runs are compared.
        let lo = if lo.is_finite() { lo } else { 1.0 };
        let y_hi = hi.min(10.0 * lo).max(lo * 1.1);
        let mut c = chart(
            area,
            "Val perplexity against wall time",
            0.0..t_max,
            0.0..y_hi,
        )?;
        mesh!(c, "Wall time (s)", "Val perplexity")
            .x_label_formatter(&tick)
            .y_label_formatter(&tick)
            .draw()?;
        for (i, (name, p)) in self.runs.iter().enumerate() {
            let col = color(i);
            let line = p.iter().copied().filter(|q| q.1 <= y_hi);
            c.draw_series(LineSeries::new(line.clone(), col.stroke_width(3)))?
                .label(name)
                .legend(move |(x, y)| PathElement::new([(x, y), (x + 20, y)], col.stroke_width(3)));
            c.draw_series(line.map(|q| Circle::new(q, 5, col.filled())))?;
        }
        legend(&mut c, SeriesLabelPosition::UpperRight)
    }
}

/// Per-worker timeline of a window: compute, push and wait spans, a lane per worker.
pub struct TimelineFigure {
    pub run: String,
    pub lanes: Vec<Lane>,
    pub window: (f64, f64),
}

impl TimelineFigure {
    fn phase_color(p: Phase) -> RGBColor {
        match p {
            Phase::Compute => RGBColor(31, 119, 180),
            Phase::Push => RGBColor(255, 127, 14),
            Phase::Wait => RGBColor(214, 39, 40),
        }
    }
}

impl Figure for TimelineFigure {
    fn draw<DB: DrawingBackend>(&self, area: &DrawingArea<DB, Shift>) -> Drawn<DB> {
        let n = self.lanes.len() as u32;
        // Lane 0 at the top.
        let row = |i: usize| n - 1 - i as u32;
        let labels: Vec<String> = self
            .lanes
            .iter()
            .map(|l| format!("rank {} (g{})", l.rank, l.group))
            .collect();
        let (a, b) = self.window;
        let caption = format!("{}: worker timeline, {a:.2}-{b:.2} s", self.run);
        area.fill(&WHITE)?;
        let (top, strip) = area.split_vertically(SIZE.1 - 70);
        let mut c = chart_with(&top, &caption, a..b, slots(n), 190)?;
        mesh!(c, "Wall time (s)", "Worker")
            .x_label_formatter(&tick)
            .y_labels(n as usize)
            .y_label_formatter(&|v| match v {
                SegmentValue::CenterOf(i) => labels
                    .get((n - 1 - i) as usize)
                    .cloned()
                    .unwrap_or_default(),
                _ => String::new(),
            })
            .disable_y_mesh()
            .draw()?;
        for (i, lane) in self.lanes.iter().enumerate() {
            let y = row(i);
            c.draw_series(lane.spans.iter().map(|&(p, s, e)| {
                Rectangle::new(
                    [(s, SegmentValue::Exact(y)), (e, SegmentValue::Exact(y + 1))],
                    Self::phase_color(p).filled(),
                )
            }))?;
            // A white rule between lanes.
            c.draw_series(LineSeries::new(
                [(a, SegmentValue::Exact(y)), (b, SegmentValue::Exact(y))],
                WHITE.stroke_width(6),
            ))?;
        }
        // The legend goes in a strip below the chart, where it hides no span.
        let y0 = 30;
        let mut x = SIZE.0 as i32 / 2 - 300;
        for (p, name) in [
            (Phase::Compute, "compute"),
            (Phase::Push, "push"),
            (Phase::Wait, "wait for weights"),
        ] {
            strip.draw(&Rectangle::new(
                [(x, y0 - 10), (x + 28, y0 + 10)],
                Self::phase_color(p).filled(),
            ))?;
            strip.draw(&Text::new(name, (x + 38, y0 - 12), (FONT, LEGEND)))?;
            x += 200;
        }
        Ok(())
    }
}

/// Bars over categories, coloured by group: wait fraction per worker, bytes per group,
/// staleness shares.
pub struct BarFigure {
    pub caption: String,
    pub x_title: String,
    pub y_title: String,
    /// `(tick label, colour index, value)` per bar.
    pub bars: Vec<(String, usize, f64)>,
    /// Legend entry per colour index (none when empty).
    pub legend: Vec<(usize, String)>,
}

impl Figure for BarFigure {
    fn draw<DB: DrawingBackend>(&self, area: &DrawingArea<DB, Shift>) -> Drawn<DB> {
        let n = self.bars.len() as u32;
        let top = self.bars.iter().map(|b| b.2).fold(0.0, f64::max);
        let top = if top > 0.0 { top * 1.12 } else { 1.0 };
        let mut c = chart(area, &self.caption, slots(n), 0.0..top)?;
        // Label every bar while they fit, else about 20 of them.
        let every = (n as usize).div_ceil(20).max(1);
        mesh!(c, self.x_title.as_str(), self.y_title.as_str())
            .x_labels(n as usize)
            .x_label_formatter(&|v| match v {
                SegmentValue::CenterOf(i) if (*i as usize).is_multiple_of(every) => self
                    .bars
                    .get(*i as usize)
                    .map(|b| b.0.clone())
                    .unwrap_or_default(),
                _ => String::new(),
            })
            .y_label_formatter(&tick)
            .disable_x_mesh()
            .draw()?;
        // Bars at most 160 px wide, so two or three categories do not fill the chart.
        let slot = c.plotting_area().dim_in_pixel().0 / n.max(2);
        let side = slot.saturating_sub(160).max(12) / 2;
        c.draw_series(self.bars.iter().enumerate().map(|(i, b)| {
            let mut r = Rectangle::new(
                [
                    (SegmentValue::Exact(i as u32), 0.0),
                    (SegmentValue::Exact(i as u32 + 1), b.2),
                ],
                color(b.1).filled(),
            );
            r.set_margin(0, 0, side, side);
            r
        }))?;
        if self.legend.is_empty() {
            return Ok(());
        }
        for (ci, name) in &self.legend {
            let col = color(*ci);
            c.draw_series(std::iter::empty::<Rectangle<(SegmentValue<u32>, f64)>>())?
                .label(name)
                .legend(move |(x, y)| Rectangle::new([(x, y - 8), (x + 18, y + 8)], col.filled()));
        }
        legend(&mut c, SeriesLabelPosition::UpperRight)
    }
}

/// One bar of a [`TimeBarsFigure`]: a mode's time to target, or none when it never got there.
#[derive(Debug, Clone, PartialEq)]
pub struct TimeBar {
    pub label: String,
    /// Seconds to the target; `None`: never within the budget.
    pub seconds: Option<f64>,
    /// Drawn in the highlight colour (the gssp variants).
    pub highlight: bool,
    /// The text at the bar's end (`21 s`, `never in 60 s`).
    pub text: String,
}

/// Horizontal bars, one per mode, of the time each took to the target accuracy, fastest at
/// the top; a mode that never got there is an outlined bar across the budget.
pub struct TimeBarsFigure {
    pub title: String,
    /// A second line under the title (what was run, when); none when empty.
    pub note: String,
    pub x_title: String,
    pub bars: Vec<TimeBar>,
    /// The training budget, seconds: the axis reaches at least this far.
    pub budget_s: Option<f64>,
}

impl TimeBarsFigure {
    /// Pixel size for its bars: 1280 wide, 64 px a bar plus the title and the axis.
    pub fn size(&self) -> (u32, u32) {
        (1280, 230 + 64 * self.bars.len().max(1) as u32)
    }
}

impl Figure for TimeBarsFigure {
    fn draw<DB: DrawingBackend>(&self, area: &DrawingArea<DB, Shift>) -> Drawn<DB> {
        area.fill(&WHITE)?;
        let head = if self.note.is_empty() { 70 } else { 110 };
        let (top, body) = area.split_vertically(head);
        top.draw(&Text::new(
            self.title.as_str(),
            (24, 20),
            (FONT, CAPTION).into_font().style(FontStyle::Bold),
        ))?;
        if !self.note.is_empty() {
            let grey = RGBColor(70, 70, 70);
            top.draw(&Text::new(
                self.note.as_str(),
                (24, 66),
                (FONT, TICKS).into_font().color(&grey),
            ))?;
        }
        let n = self.bars.len().max(1) as u32;
        let longest = self.bars.iter().map(|b| b.seconds.unwrap_or(0.0));
        let reach = longest.fold(self.budget_s.unwrap_or(1.0), f64::max);
        let x_max = reach * 1.12;
        let mut c = ChartBuilder::on(&body)
            .margin(24)
            .x_label_area_size(80)
            .y_label_area_size(320)
            .build_cartesian_2d(0.0..x_max, slots(n))?;
        // Bar 0 at the top.
        let row = |i: usize| n - 1 - i as u32;
        mesh!(c, self.x_title.as_str(), "")
            .light_line_style(WHITE)
            .x_label_formatter(&tick)
            .y_labels(n as usize)
            .y_label_formatter(&|v| match v {
                SegmentValue::CenterOf(i) => (n - 1)
                    .checked_sub(*i)
                    .and_then(|k| self.bars.get(k as usize))
                    .map(|b| b.label.clone())
                    .unwrap_or_default(),
                _ => String::new(),
            })
            .disable_y_mesh()
            .draw()?;
        let strong = RGBColor(43, 123, 186);
        let pale = RGBColor(159, 184, 204);
        let empty = RGBColor(242, 242, 242);
        let edge = RGBColor(170, 170, 170);
        for (i, b) in self.bars.iter().enumerate() {
            let y = row(i);
            let end = b.seconds.unwrap_or(reach);
            let corners = [
                (0.0, SegmentValue::Exact(y)),
                (end, SegmentValue::Exact(y + 1)),
            ];
            let mut fill = Rectangle::new(
                corners.clone(),
                match (b.seconds, b.highlight) {
                    (None, _) => empty.filled(),
                    (Some(_), true) => strong.filled(),
                    (Some(_), false) => pale.filled(),
                },
            );
            fill.set_margin(10, 10, 0, 0);
            c.draw_series(std::iter::once(fill))?;
            if b.seconds.is_none() {
                let mut outline = Rectangle::new(corners, edge.stroke_width(2));
                outline.set_margin(10, 10, 0, 0);
                c.draw_series(std::iter::once(outline))?;
            }
            // The text after the bar, or inside the outline of one that never got there.
            let at = match b.seconds {
                Some(s) => s + x_max * 0.01,
                None => x_max * 0.01,
            };
            c.draw_series(std::iter::once(
                EmptyElement::at((at, SegmentValue::CenterOf(y)))
                    + Text::new(b.text.clone(), (0, -5), (FONT, LEGEND)),
            ))?;
        }
        Ok(())
    }
}

/// Upload ratio (%) of each group's exchanges against wall time.
/// One line of a [`LinesFigure`]: `(label, colour index, [(time_s, value)])`.
pub type Line = (String, usize, Vec<(f64, f64)>);

/// Lines over the run's wall time: one per group's upload ratio, or per worker's batch.
pub struct LinesFigure {
    pub caption: String,
    pub y_title: String,
    pub lines: Vec<Line>,
}

impl Figure for LinesFigure {
    fn draw<DB: DrawingBackend>(&self, area: &DrawingArea<DB, Shift>) -> Drawn<DB> {
        let pts = self.lines.iter().flat_map(|(_, _, p)| p.iter());
        let t_max = pts.clone().map(|p| p.0).fold(1e-3, f64::max) * 1.02;
        let y_max = pts.map(|p| p.1).fold(1e-6, f64::max) * 1.15;
        let mut c = chart(area, &self.caption, 0.0..t_max, 0.0..y_max)?;
        mesh!(c, "Wall time (s)", &self.y_title)
            .x_label_formatter(&tick)
            .y_label_formatter(&tick)
            .draw()?;
        for (label, i, p) in &self.lines {
            let col = color(*i);
            c.draw_series(LineSeries::new(p.iter().copied(), col.stroke_width(3)))?
                .label(label)
                .legend(move |(x, y)| PathElement::new([(x, y), (x + 20, y)], col.stroke_width(3)));
        }
        legend(&mut c, SeriesLabelPosition::UpperRight)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ticks_drop_trailing_zeros() {
        assert_eq!(tick(&10.0), "10");
        assert_eq!(tick(&2.5), "2.5");
        assert_eq!(tick(&0.25), "0.25");
        assert_eq!(tick(&-0.0001), "0");
    }
}
