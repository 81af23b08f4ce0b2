//! Typed APIs for cluster-migration-addon: the OCM resources it touches ([`ocm`]), our own
//! CRDs ([`migration`]), well-known names ([`names`]) and the CRD registry ([`crds`]).

// kube's `#[kube(printcolumn(...), shortname = ...)]` repeats attribute keys by design.
#![allow(clippy::duplicated_attributes)]

pub mod bundle;
pub mod carried;
pub mod cli;
pub mod common;
pub mod contract;
pub mod crds;
#[cfg(feature = "runtime")]
pub mod discovery;
pub mod labels;
pub mod migration;
pub mod names;
pub mod ocm;
#[cfg(feature = "runtime")]
pub mod runtime;
pub mod task_report;
pub mod tenancy;
#[cfg(feature = "test-util")]
pub mod testing;
