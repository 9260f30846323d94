//! `--segment` and `--start-at`: the flags that make one `gust` process a share of a
//! run several generate together (docs/distributed.md).

use gust_engine::RunSpec;
use gust_engine::spec::segment::Segment;

#[derive(clap::Args, Debug, Default, Clone)]
pub struct SegmentArgs {
    /// This process's share of a run several generate together: `i/n` (segment i
    /// of n, counted from 0 like Kubernetes' JOB_COMPLETION_INDEX) or k6's `a:b`
    /// (`0:1/3`, `0.25:0.5`). Rate, slots, iterations and data rows are split
    /// exactly; `gust merge` combines the reports.
    #[arg(long, visible_alias = "execution-segment", value_name = "i/n|a:b")]
    pub segment: Option<String>,
    /// Start the run at this instant (RFC 3339, e.g. 2026-12-07T10:00:00Z), so every
    /// segment starts together. A process that gets there late starts at once and
    /// reports how late.
    #[arg(long, value_name = "RFC3339")]
    pub start_at: Option<String>,
}

impl SegmentArgs {
    /// Put the flags into `spec`, over what a spec file said.
    pub fn apply(&self, spec: &mut RunSpec) -> Result<(), String> {
        if let Some(text) = &self.segment {
            spec.segment = Some(Segment::parse(text).map_err(|e| e.to_string())?);
        }
        if let Some(at) = &self.start_at {
            spec.start_at = Some(at.clone());
        }
        Ok(())
    }
}
