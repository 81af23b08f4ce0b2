//! Helpers shared by the conformance tests.
#![allow(dead_code, clippy::unwrap_used, clippy::expect_used)]

use std::future::Future;
use std::time::{Duration, Instant};

use kube::CustomResource;
use kube_sim::{KubeSim, Options};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// A test CRD: namespaced, with a status subresource, printer columns, list-map conditions.
#[derive(CustomResource, Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[kube(
    group = "example.io",
    version = "v1",
    kind = "Widget",
    namespaced,
    status = "WidgetStatus",
    shortname = "wd",
    printcolumn(name = "SIZE", type_ = "integer", json_path = ".spec.size"),
    printcolumn(
        name = "READY",
        type_ = "string",
        json_path = ".status.conditions[?(@.type==\"Ready\")].status"
    ),
    printcolumn(
        name = "AGE",
        type_ = "date",
        json_path = ".metadata.creationTimestamp"
    )
)]
pub struct WidgetSpec {
    #[schemars(range(min = 0, max = 100))]
    pub size: i32,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub color: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub owner: Option<String>,
}

/// Status of a Widget.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct WidgetStatus {
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(schema_with = "conditions_schema")]
    pub conditions: Vec<WidgetCondition>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub phase: Option<String>,
}

fn conditions_schema(generator: &mut schemars::SchemaGenerator) -> schemars::Schema {
    let mut s = generator.subschema_for::<Vec<WidgetCondition>>();
    let o = s.ensure_object();
    o.insert("x-kubernetes-list-type".into(), "map".into());
    o.insert(
        "x-kubernetes-list-map-keys".into(),
        serde_json::json!(["type"]),
    );
    s
}

/// A condition.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct WidgetCondition {
    #[serde(rename = "type")]
    pub type_: String,
    pub status: String,
}

/// Starts an HTTPS instance with the Widget CRD installed.
pub async fn start() -> KubeSim {
    start_with(Options::default()).await
}

/// Starts an HTTPS instance with options, with the Widget CRD installed.
pub async fn start_with(opts: Options) -> KubeSim {
    let sim = KubeSim::start(opts).await.unwrap();
    install_widget_crd(&sim).await;
    sim
}

/// Installs the Widget CRD through the API.
pub async fn install_widget_crd(sim: &KubeSim) {
    use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
    use kube::CustomResourceExt;
    let client = sim.client().await.unwrap();
    let crds: kube::Api<CustomResourceDefinition> = kube::Api::all(client);
    crds.create(&Default::default(), &Widget::crd())
        .await
        .unwrap();
}

/// A Widget of a given size.
pub fn widget(name: &str, size: i32) -> Widget {
    Widget::new(
        name,
        WidgetSpec {
            size,
            ..Default::default()
        },
    )
}

/// Polls `check` until it returns `Some`, failing after `deadline`.
pub async fn eventually<T, F, Fut>(deadline: Duration, what: &str, mut check: F) -> T
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Option<T>>,
{
    let start = Instant::now();
    loop {
        if let Some(v) = check().await {
            return v;
        }
        assert!(
            start.elapsed() < deadline,
            "timed out after {deadline:?} waiting for {what}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}
