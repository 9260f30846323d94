//! The soak chart: four series over time (rate, p99, RSS, DB size), one
//! panel each, as SVG. plotters' SVG backend writes labels as `<text>`
//! elements and sizes them with its built-in estimate, so no font file and
//! no fontconfig are needed (the `ttf`/`ab_glyph` features stay off).

use crate::soak::Sample;
use anyhow::{Result, anyhow};
use plotters::prelude::*;

/// One panel: its title, unit and points (seconds, value); unknown samples
/// are left out.
pub struct Panel {
    pub title: &'static str,
    pub unit: &'static str,
    pub points: Vec<(f64, f64)>,
}

/// The four panels of a soak, in display units.
pub fn soak_panels(samples: &[Sample]) -> Vec<Panel> {
    let series = |f: &dyn Fn(&Sample) -> Option<f64>| -> Vec<(f64, f64)> {
        samples
            .iter()
            .filter_map(|s| Some((s.t_s, f(s)?)))
            .collect()
    };
    let mib = |b: Option<u64>| b.map(|b| b as f64 / 1_048_576.0);
    vec![
        Panel {
            title: "issued certificates per second",
            unit: "certs/s",
            points: series(&|s| Some(s.certs_per_s)),
        },
        Panel {
            title: "corrected p99 latency (per interval)",
            unit: "ms",
            points: series(&|s| Some(s.p99_ms)),
        },
        Panel {
            title: "server RSS",
            unit: "MiB",
            points: series(&|s| mib(s.rss_bytes)),
        },
        Panel {
            title: "DB size on disk",
            unit: "MiB",
            points: series(&|s| mib(s.db_bytes)),
        },
    ]
}

/// An axis range that holds `values` with some headroom and is never empty.
pub fn axis_max(values: impl Iterator<Item = f64>) -> f64 {
    let m = values.filter(|v| v.is_finite()).fold(0.0f64, f64::max);
    if m > 0.0 { m * 1.1 } else { 1.0 }
}

/// The SVG text of the soak chart.
pub fn soak_svg(samples: &[Sample]) -> Result<String> {
    let panels = soak_panels(samples);
    let x_max = axis_max(samples.iter().map(|s| s.t_s));
    let mut svg = String::new();
    {
        let root = SVGBackend::with_string(&mut svg, (900, 1000)).into_drawing_area();
        root.fill(&WHITE).map_err(|e| anyhow!("chart: {e}"))?;
        let areas = root.split_evenly((panels.len(), 1));
        for (area, p) in areas.iter().zip(&panels) {
            let y_max = axis_max(p.points.iter().map(|(_, v)| *v));
            let mut chart = ChartBuilder::on(area)
                .caption(p.title, ("sans-serif", 16))
                .margin(10)
                .x_label_area_size(30)
                .y_label_area_size(70)
                .build_cartesian_2d(0f64..x_max, 0f64..y_max)
                .map_err(|e| anyhow!("chart: {e}"))?;
            chart
                .configure_mesh()
                .x_desc("s")
                .y_desc(p.unit)
                .draw()
                .map_err(|e| anyhow!("chart: {e}"))?;
            chart
                .draw_series(LineSeries::new(p.points.iter().copied(), &BLUE))
                .map_err(|e| anyhow!("chart: {e}"))?;
        }
        root.present().map_err(|e| anyhow!("chart: {e}"))?;
    }
    Ok(svg)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_chart_is_an_svg_with_four_titled_panels() {
        let samples: Vec<Sample> = (1..=6)
            .map(|i| Sample {
                t_s: f64::from(i) * 10.0,
                certs_per_s: 4000.0 + f64::from(i),
                p99_ms: 3.0,
                rss_bytes: Some(100 << 20),
                db_bytes: if i == 3 { None } else { Some(50 << 20) },
                ..Sample::default()
            })
            .collect();
        let panels = soak_panels(&samples);
        assert_eq!(panels.len(), 4);
        assert_eq!(panels[3].points.len(), 5, "an unknown DB size is left out");
        assert_eq!(panels[2].points[0], (10.0, 100.0));
        let svg = soak_svg(&samples).unwrap();
        assert!(svg.starts_with("<svg") && svg.trim_end().ends_with("</svg>"));
        for p in &panels {
            assert!(svg.contains(p.title), "{}", p.title);
        }
        assert!(svg.contains("<polyline"));
        // No samples: still a valid (empty) chart.
        assert!(soak_svg(&[]).unwrap().contains("</svg>"));
    }

    #[test]
    fn axes_have_headroom_and_are_never_empty() {
        assert_eq!(axis_max([].into_iter()), 1.0);
        assert_eq!(axis_max([0.0, f64::NAN].into_iter()), 1.0);
        assert!((axis_max([5.0, 10.0].into_iter()) - 11.0).abs() < 1e-9);
    }
}
