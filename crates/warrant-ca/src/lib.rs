//! warrant-ca
