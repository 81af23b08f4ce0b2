//! `authentication.open-cluster-management.io`: ManagedServiceAccount.

use kube::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_with::skip_serializing_none;

use crate::common::{Condition, Time};

/// A ServiceAccount on a managed cluster whose token is projected into a hub secret of the same
/// name (keys `token` and `ca.crt`) in the cluster's namespace.
#[skip_serializing_none]
#[derive(CustomResource, Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[kube(
    group = "authentication.open-cluster-management.io",
    version = "v1beta1",
    kind = "ManagedServiceAccount",
    namespaced,
    status = "ManagedServiceAccountStatus",
    derive = "Default",
    derive = "PartialEq"
)]
#[serde(rename_all = "camelCase")]
pub struct ManagedServiceAccountSpec {
    pub rotation: ManagedServiceAccountRotation,
    #[serde(default, deserialize_with = "crate::common::saturating::opt_i32")]
    pub ttl_seconds_after_creation: Option<i32>,
}

/// Token rotation.
#[skip_serializing_none]
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct ManagedServiceAccountRotation {
    pub enabled: Option<bool>,
    /// Token lifetime as a Go duration (upstream default `8640h0m0s`).
    pub validity: Option<String>,
}

/// Observed state of a ManagedServiceAccount.
#[skip_serializing_none]
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ManagedServiceAccountStatus {
    pub conditions: Option<Vec<Condition>>,
    pub expiration_timestamp: Option<Time>,
    pub token_secret_ref: Option<SecretRef>,
}

/// The hub secret holding the token.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct SecretRef {
    pub name: String,
    pub last_refresh_timestamp: Time,
}
