//! warrant-store
