//! gust-engine
