//! warrant-server
