//! The kinds this server serves: built-in ones from a fixed table, custom ones from CRDs.

use std::collections::BTreeMap;
use std::sync::Arc;

use serde_json::Value;

use crate::meta::NameRule;

/// Built-in kinds that need behaviour of their own.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Builtin {
    Namespace,
    Secret,
    ConfigMap,
    Service,
    ServiceAccount,
    CoreEvent,
    Event,
    Lease,
    Deployment,
    Job,
    ClusterRole,
    ClusterRoleBinding,
    Role,
    RoleBinding,
    CertificateSigningRequest,
    SelfSubjectAccessReview,
    SubjectAccessReview,
    CustomResourceDefinition,
}

/// A printer column of a CRD.
#[derive(Clone, Debug, PartialEq)]
pub struct PrinterColumn {
    pub name: String,
    pub type_: String,
    pub format: Option<String>,
    pub description: String,
    pub priority: i64,
    pub json_path: String,
}

/// One served resource at one version.
#[derive(Clone, Debug)]
pub struct ResourceType {
    pub group: String,
    pub version: String,
    pub kind: String,
    pub list_kind: String,
    pub plural: String,
    pub singular: String,
    pub namespaced: bool,
    pub short_names: Vec<String>,
    pub categories: Vec<String>,
    /// Subresources such as `status`, `token`, `approval`.
    pub subresources: Vec<String>,
    /// Storage shared by every version (and by core and events.k8s.io Events).
    pub storage: String,
    pub builtin: Option<Builtin>,
    /// The CRD's structural schema for this version.
    pub schema: Option<Arc<Value>>,
    pub printer_columns: Vec<PrinterColumn>,
    pub name_rule: NameRule,
    /// Whether `.metadata.generation` is tracked.
    pub tracks_generation: bool,
    /// Create-only kinds that are answered, not stored (access reviews).
    pub virtual_kind: bool,
    /// The CRD this type comes from.
    pub crd: Option<String>,
    /// Field selectors beyond metadata.name and metadata.namespace.
    pub selectable_fields: Vec<String>,
}

impl ResourceType {
    /// `group/version`, or `version` for the core group.
    pub fn api_version(&self) -> String {
        if self.group.is_empty() {
            self.version.clone()
        } else {
            format!("{}/{}", self.group, self.version)
        }
    }

    /// Whether writes to the main resource ignore `status` (and `/status` writes only it).
    pub fn has_status(&self) -> bool {
        self.subresources.iter().any(|s| s == "status")
    }

    /// The verbs discovery lists.
    pub fn verbs(&self) -> Vec<&'static str> {
        if self.virtual_kind {
            return vec!["create"];
        }
        vec![
            "create",
            "delete",
            "deletecollection",
            "get",
            "list",
            "patch",
            "update",
            "watch",
        ]
    }

    /// Whether the field is allowed in a field selector on this kind.
    pub fn supports_field(&self, field: &str) -> bool {
        field == "metadata.name"
            || (field == "metadata.namespace" && self.namespaced)
            || self.selectable_fields.iter().any(|f| f == field)
    }

    /// Top-level fields a built-in kind accepts (others are unknown fields).
    pub fn builtin_fields(&self) -> Option<&'static [&'static str]> {
        use Builtin::*;
        Some(match self.builtin? {
            Namespace
            | Service
            | Deployment
            | Job
            | Lease
            | CertificateSigningRequest
            | CustomResourceDefinition => &["spec", "status"],
            SelfSubjectAccessReview | SubjectAccessReview => &["spec", "status"],
            Secret => &["data", "stringData", "type", "immutable"],
            ConfigMap => &["data", "binaryData", "immutable"],
            ServiceAccount => &[
                "secrets",
                "imagePullSecrets",
                "automountServiceAccountToken",
            ],
            ClusterRole => &["rules", "aggregationRule"],
            Role => &["rules"],
            ClusterRoleBinding | RoleBinding => &["subjects", "roleRef"],
            CoreEvent => &[
                "involvedObject",
                "reason",
                "message",
                "source",
                "firstTimestamp",
                "lastTimestamp",
                "count",
                "type",
                "eventTime",
                "series",
                "action",
                "related",
                "reportingComponent",
                "reportingInstance",
            ],
            Event => &[
                "eventTime",
                "series",
                "reportingController",
                "reportingInstance",
                "action",
                "reason",
                "regarding",
                "related",
                "note",
                "type",
                "deprecatedSource",
                "deprecatedFirstTimestamp",
                "deprecatedLastTimestamp",
                "deprecatedCount",
            ],
        })
    }
}

struct Spec {
    group: &'static str,
    version: &'static str,
    kind: &'static str,
    plural: &'static str,
    namespaced: bool,
    short: &'static [&'static str],
    sub: &'static [&'static str],
    storage: &'static str,
    builtin: Builtin,
    name_rule: NameRule,
    generation: bool,
    fields: &'static [&'static str],
}

const BUILTINS: &[Spec] = &[
    Spec {
        group: "",
        version: "v1",
        kind: "Namespace",
        plural: "namespaces",
        namespaced: false,
        short: &["ns"],
        sub: &["status", "finalize"],
        storage: "namespaces",
        builtin: Builtin::Namespace,
        name_rule: NameRule::Label,
        generation: false,
        fields: &["status.phase"],
    },
    Spec {
        group: "",
        version: "v1",
        kind: "Secret",
        plural: "secrets",
        namespaced: true,
        short: &[],
        sub: &[],
        storage: "secrets",
        builtin: Builtin::Secret,
        name_rule: NameRule::Subdomain,
        generation: false,
        fields: &["type"],
    },
    Spec {
        group: "",
        version: "v1",
        kind: "ConfigMap",
        plural: "configmaps",
        namespaced: true,
        short: &["cm"],
        sub: &[],
        storage: "configmaps",
        builtin: Builtin::ConfigMap,
        name_rule: NameRule::Subdomain,
        generation: false,
        fields: &[],
    },
    Spec {
        group: "",
        version: "v1",
        kind: "Service",
        plural: "services",
        namespaced: true,
        short: &["svc"],
        sub: &["status"],
        storage: "services",
        builtin: Builtin::Service,
        name_rule: NameRule::Label,
        generation: false,
        fields: &[],
    },
    Spec {
        group: "",
        version: "v1",
        kind: "ServiceAccount",
        plural: "serviceaccounts",
        namespaced: true,
        short: &["sa"],
        sub: &["token"],
        storage: "serviceaccounts",
        builtin: Builtin::ServiceAccount,
        name_rule: NameRule::Subdomain,
        generation: false,
        fields: &[],
    },
    Spec {
        group: "",
        version: "v1",
        kind: "Event",
        plural: "events",
        namespaced: true,
        short: &["ev"],
        sub: &[],
        storage: "events",
        builtin: Builtin::CoreEvent,
        name_rule: NameRule::Subdomain,
        generation: false,
        fields: &[
            "involvedObject.kind",
            "involvedObject.namespace",
            "involvedObject.name",
            "involvedObject.uid",
            "involvedObject.apiVersion",
            "involvedObject.resourceVersion",
            "involvedObject.fieldPath",
            "reason",
            "reportingComponent",
            "source",
            "type",
        ],
    },
    Spec {
        group: "events.k8s.io",
        version: "v1",
        kind: "Event",
        plural: "events",
        namespaced: true,
        short: &["ev"],
        sub: &[],
        storage: "events",
        builtin: Builtin::Event,
        name_rule: NameRule::Subdomain,
        generation: false,
        fields: &[
            "regarding.kind",
            "regarding.namespace",
            "regarding.name",
            "regarding.uid",
            "reason",
            "reportingController",
            "type",
        ],
    },
    Spec {
        group: "coordination.k8s.io",
        version: "v1",
        kind: "Lease",
        plural: "leases",
        namespaced: true,
        short: &[],
        sub: &[],
        storage: "coordination.k8s.io/leases",
        builtin: Builtin::Lease,
        name_rule: NameRule::Subdomain,
        generation: false,
        fields: &[],
    },
    Spec {
        group: "apps",
        version: "v1",
        kind: "Deployment",
        plural: "deployments",
        namespaced: true,
        short: &["deploy"],
        sub: &["status"],
        storage: "apps/deployments",
        builtin: Builtin::Deployment,
        name_rule: NameRule::Subdomain,
        generation: true,
        fields: &[],
    },
    Spec {
        group: "batch",
        version: "v1",
        kind: "Job",
        plural: "jobs",
        namespaced: true,
        short: &[],
        sub: &["status"],
        storage: "batch/jobs",
        builtin: Builtin::Job,
        name_rule: NameRule::Subdomain,
        generation: true,
        fields: &[],
    },
    Spec {
        group: "rbac.authorization.k8s.io",
        version: "v1",
        kind: "ClusterRole",
        plural: "clusterroles",
        namespaced: false,
        short: &[],
        sub: &[],
        storage: "rbac.authorization.k8s.io/clusterroles",
        builtin: Builtin::ClusterRole,
        name_rule: NameRule::PathSegment,
        generation: false,
        fields: &[],
    },
    Spec {
        group: "rbac.authorization.k8s.io",
        version: "v1",
        kind: "ClusterRoleBinding",
        plural: "clusterrolebindings",
        namespaced: false,
        short: &[],
        sub: &[],
        storage: crate::store::CLUSTER_ROLE_BINDINGS,
        builtin: Builtin::ClusterRoleBinding,
        name_rule: NameRule::PathSegment,
        generation: false,
        fields: &[],
    },
    Spec {
        group: "rbac.authorization.k8s.io",
        version: "v1",
        kind: "Role",
        plural: "roles",
        namespaced: true,
        short: &[],
        sub: &[],
        storage: "rbac.authorization.k8s.io/roles",
        builtin: Builtin::Role,
        name_rule: NameRule::PathSegment,
        generation: false,
        fields: &[],
    },
    Spec {
        group: "rbac.authorization.k8s.io",
        version: "v1",
        kind: "RoleBinding",
        plural: "rolebindings",
        namespaced: true,
        short: &[],
        sub: &[],
        storage: "rbac.authorization.k8s.io/rolebindings",
        builtin: Builtin::RoleBinding,
        name_rule: NameRule::PathSegment,
        generation: false,
        fields: &[],
    },
    Spec {
        group: "certificates.k8s.io",
        version: "v1",
        kind: "CertificateSigningRequest",
        plural: "certificatesigningrequests",
        namespaced: false,
        short: &["csr"],
        sub: &["status", "approval"],
        storage: "certificates.k8s.io/certificatesigningrequests",
        builtin: Builtin::CertificateSigningRequest,
        name_rule: NameRule::PathSegment,
        generation: true,
        fields: &["spec.signerName"],
    },
    Spec {
        group: "authorization.k8s.io",
        version: "v1",
        kind: "SelfSubjectAccessReview",
        plural: "selfsubjectaccessreviews",
        namespaced: false,
        short: &[],
        sub: &[],
        storage: "authorization.k8s.io/selfsubjectaccessreviews",
        builtin: Builtin::SelfSubjectAccessReview,
        name_rule: NameRule::Subdomain,
        generation: false,
        fields: &[],
    },
    Spec {
        group: "authorization.k8s.io",
        version: "v1",
        kind: "SubjectAccessReview",
        plural: "subjectaccessreviews",
        namespaced: false,
        short: &[],
        sub: &[],
        storage: "authorization.k8s.io/subjectaccessreviews",
        builtin: Builtin::SubjectAccessReview,
        name_rule: NameRule::Subdomain,
        generation: false,
        fields: &[],
    },
    Spec {
        group: "apiextensions.k8s.io",
        version: "v1",
        kind: "CustomResourceDefinition",
        plural: "customresourcedefinitions",
        namespaced: false,
        short: &["crd", "crds"],
        sub: &["status"],
        storage: "apiextensions.k8s.io/customresourcedefinitions",
        builtin: Builtin::CustomResourceDefinition,
        name_rule: NameRule::Subdomain,
        generation: true,
        fields: &[],
    },
];

/// Every served type, built-in and custom.
#[derive(Clone, Debug, Default)]
pub struct Registry {
    types: Vec<Arc<ResourceType>>,
}

impl Registry {
    /// The built-in kinds.
    pub fn with_builtins() -> Self {
        let types = BUILTINS
            .iter()
            .map(|s| {
                Arc::new(ResourceType {
                    group: s.group.into(),
                    version: s.version.into(),
                    kind: s.kind.into(),
                    list_kind: format!("{}List", s.kind),
                    plural: s.plural.into(),
                    singular: s.kind.to_lowercase(),
                    namespaced: s.namespaced,
                    short_names: s.short.iter().map(|x| (*x).into()).collect(),
                    categories: if matches!(s.builtin, Builtin::Deployment | Builtin::Job) {
                        vec!["all".into()]
                    } else {
                        vec![]
                    },
                    subresources: s.sub.iter().map(|x| (*x).into()).collect(),
                    storage: s.storage.into(),
                    builtin: Some(s.builtin),
                    schema: None,
                    printer_columns: vec![],
                    name_rule: s.name_rule,
                    tracks_generation: s.generation,
                    virtual_kind: matches!(
                        s.builtin,
                        Builtin::SelfSubjectAccessReview | Builtin::SubjectAccessReview
                    ),
                    crd: None,
                    selectable_fields: s.fields.iter().map(|x| (*x).into()).collect(),
                })
            })
            .collect();
        Self { types }
    }

    /// Looks a type up by URL parts.
    pub fn find(&self, group: &str, version: &str, plural: &str) -> Option<Arc<ResourceType>> {
        self.types
            .iter()
            .find(|t| t.group == group && t.version == version && t.plural == plural)
            .cloned()
    }

    /// Looks a type up by apiVersion and kind.
    pub fn find_kind(&self, api_version: &str, kind: &str) -> Option<Arc<ResourceType>> {
        let (group, version) = split_api_version(api_version);
        self.types
            .iter()
            .find(|t| t.group == group && t.version == version && t.kind == kind)
            .cloned()
    }

    /// Every type, in registration order.
    pub fn all(&self) -> &[Arc<ResourceType>] {
        &self.types
    }

    /// Every type sharing a storage.
    pub fn by_storage<'a>(
        &'a self,
        storage: &'a str,
    ) -> impl Iterator<Item = &'a Arc<ResourceType>> {
        self.types.iter().filter(move |t| t.storage == storage)
    }

    /// Groups and their versions, in the order discovery lists them (core first, preferred
    /// version first).
    pub fn groups(&self) -> BTreeMap<String, Vec<String>> {
        let mut groups: BTreeMap<String, Vec<String>> = BTreeMap::new();
        for t in &self.types {
            let versions = groups.entry(t.group.clone()).or_default();
            if !versions.contains(&t.version) {
                versions.push(t.version.clone());
            }
        }
        for versions in groups.values_mut() {
            versions.sort_by_key(|v| std::cmp::Reverse(version_priority(v)));
        }
        groups
    }

    /// Replaces the types of a CRD (empty `types` removes it).
    pub fn set_crd(&mut self, crd_name: &str, types: Vec<ResourceType>) {
        self.types.retain(|t| t.crd.as_deref() != Some(crd_name));
        self.types.extend(types.into_iter().map(Arc::new));
    }
}

/// Splits `group/version` (`v1` is the core group).
pub fn split_api_version(api_version: &str) -> (&str, &str) {
    match api_version.split_once('/') {
        Some((g, v)) => (g, v),
        None => ("", api_version),
    }
}

/// Kubernetes version priority: GA > beta > alpha, then by numbers.
pub fn version_priority(v: &str) -> (u8, u32, u32) {
    let Some(rest) = v.strip_prefix('v') else {
        return (0, 0, 0);
    };
    let digits: String = rest.chars().take_while(char::is_ascii_digit).collect();
    let major = digits.parse().unwrap_or(0);
    let tail = &rest[digits.len()..];
    let num = |s: &str| s.parse().unwrap_or(0);
    if tail.is_empty() {
        (3, major, 0)
    } else if let Some(b) = tail.strip_prefix("beta") {
        (2, major, num(b))
    } else if let Some(a) = tail.strip_prefix("alpha") {
        (1, major, num(a))
    } else {
        (0, major, 0)
    }
}

/// Builds the served types of a CRD, or the reasons it is invalid.
pub fn crd_types(crd: &Value) -> Result<Vec<ResourceType>, Vec<(String, String)>> {
    let mut errors = Vec::new();
    let name = crate::meta::meta_str(crd, "name")
        .unwrap_or_default()
        .to_owned();
    let spec = crd.get("spec").cloned().unwrap_or(Value::Null);
    let s = |p: &str| {
        spec.pointer(p)
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_owned()
    };
    let group = s("/group");
    let kind = s("/names/kind");
    let plural = s("/names/plural");
    let scope = s("/scope");
    if group.is_empty() {
        errors.push(("spec.group".into(), "Required value".into()));
    }
    if kind.is_empty() {
        errors.push(("spec.names.kind".into(), "Required value".into()));
    }
    if plural.is_empty() {
        errors.push(("spec.names.plural".into(), "Required value".into()));
    }
    if !group.is_empty() && !plural.is_empty() && name != format!("{plural}.{group}") {
        errors.push((
            "metadata.name".into(),
            format!("Invalid value: {name:?}: must be spec.names.plural+\".\"+spec.group"),
        ));
    }
    if scope != "Namespaced" && scope != "Cluster" {
        errors.push((
            "spec.scope".into(),
            format!("Unsupported value: {scope:?}: supported values: \"Cluster\", \"Namespaced\""),
        ));
    }
    let versions = spec
        .get("versions")
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default();
    if versions.is_empty() {
        errors.push((
            "spec.versions".into(),
            "Invalid value: must have exactly one version marked as storage version".into(),
        ));
    }
    let storage_count = versions
        .iter()
        .filter(|v| v.get("storage").and_then(Value::as_bool) == Some(true))
        .count();
    if !versions.is_empty() && storage_count != 1 {
        errors.push((
            "spec.versions".into(),
            "Invalid value: must have exactly one version marked as storage version".into(),
        ));
    }
    let strings = |p: &str| -> Vec<String> {
        spec.pointer(p)
            .and_then(Value::as_array)
            .map(|a| {
                a.iter()
                    .filter_map(|x| x.as_str().map(str::to_owned))
                    .collect()
            })
            .unwrap_or_default()
    };
    let mut types = Vec::new();
    for (i, v) in versions.iter().enumerate() {
        let vname = v
            .get("name")
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_owned();
        if vname.is_empty() {
            errors.push((format!("spec.versions[{i}].name"), "Required value".into()));
            continue;
        }
        let schema = v.pointer("/schema/openAPIV3Schema").cloned();
        if schema.is_none() {
            errors.push((
                format!("spec.versions[{i}].schema.openAPIV3Schema"),
                "Required value: schemas are required".into(),
            ));
        }
        if v.get("served").and_then(Value::as_bool) != Some(true) {
            continue;
        }
        let mut subresources = Vec::new();
        if v.pointer("/subresources/status").is_some() {
            subresources.push("status".to_owned());
        }
        if v.pointer("/subresources/scale").is_some() {
            subresources.push("scale".to_owned());
        }
        let printer_columns = v
            .get("additionalPrinterColumns")
            .and_then(Value::as_array)
            .map(|cols| {
                cols.iter()
                    .map(|c| PrinterColumn {
                        name: c
                            .get("name")
                            .and_then(Value::as_str)
                            .unwrap_or_default()
                            .into(),
                        type_: c
                            .get("type")
                            .and_then(Value::as_str)
                            .unwrap_or("string")
                            .into(),
                        format: c.get("format").and_then(Value::as_str).map(str::to_owned),
                        description: c
                            .get("description")
                            .and_then(Value::as_str)
                            .unwrap_or_default()
                            .into(),
                        priority: c.get("priority").and_then(Value::as_i64).unwrap_or(0),
                        json_path: c
                            .get("jsonPath")
                            .and_then(Value::as_str)
                            .unwrap_or_default()
                            .into(),
                    })
                    .collect()
            })
            .unwrap_or_default();
        let selectable_fields = v
            .get("selectableFields")
            .and_then(Value::as_array)
            .map(|a| {
                a.iter()
                    .filter_map(|f| f.get("jsonPath").and_then(Value::as_str))
                    .map(|p| p.trim_start_matches('.').to_owned())
                    .collect()
            })
            .unwrap_or_default();
        types.push(ResourceType {
            group: group.clone(),
            version: vname,
            kind: kind.clone(),
            list_kind: {
                let lk = s("/names/listKind");
                if lk.is_empty() {
                    format!("{kind}List")
                } else {
                    lk
                }
            },
            plural: plural.clone(),
            singular: {
                let sg = s("/names/singular");
                if sg.is_empty() {
                    kind.to_lowercase()
                } else {
                    sg
                }
            },
            namespaced: scope == "Namespaced",
            short_names: strings("/names/shortNames"),
            categories: strings("/names/categories"),
            subresources,
            storage: format!("{group}/{plural}"),
            builtin: None,
            schema: schema.map(Arc::new),
            printer_columns,
            name_rule: NameRule::Subdomain,
            tracks_generation: true,
            virtual_kind: false,
            crd: Some(name.clone()),
            selectable_fields,
        });
    }
    if errors.is_empty() {
        Ok(types)
    } else {
        Err(errors)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn version_order() {
        let mut v = vec!["v1alpha1", "v1", "v1beta1", "v2", "v1beta2"];
        v.sort_by_key(|x| std::cmp::Reverse(version_priority(x)));
        assert_eq!(v, ["v2", "v1", "v1beta2", "v1beta1", "v1alpha1"]);
    }

    #[test]
    fn crd_name_must_match() {
        let crd = serde_json::json!({
            "metadata": {"name": "foos.example.io"},
            "spec": {"group": "example.io", "scope": "Namespaced",
                     "names": {"kind": "Foo", "plural": "bars"},
                     "versions": [{"name": "v1", "served": true, "storage": true,
                                   "schema": {"openAPIV3Schema": {"type": "object"}}}]}
        });
        let errs = crd_types(&crd).unwrap_err();
        assert_eq!(errs[0].0, "metadata.name");
    }
}
