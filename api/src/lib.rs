//! Typed APIs for cluster-migration-addon: the OCM resources it touches ([`ocm`]), our own
//! CRDs ([`migration`]), well-known names ([`names`]) and the CRD registry ([`crds`]).

pub mod common;
pub mod contract;
pub mod crds;
pub mod migration;
pub mod names;
pub mod ocm;
