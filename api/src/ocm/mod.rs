//! The OCM (and ACM/MCE) resources the addon and the simulators touch, written by hand from the
//! upstream field lists. Only the fields we use are declared; a contract test checks each against
//! the upstream CRD.

pub mod addon;
pub mod agent;
pub mod cluster;
pub mod config;
pub mod msa;
pub mod operator;
pub mod work;
