//! What an AddOnDeploymentConfig asks of the agent's install, read and bounded: its
//! customized variables, install namespace, version, registry mirrors and resources.

use migration_api::names;
use migration_api::ocm::addon::{AddOnDeploymentConfigSpec, ContainerResourceRequirements};
use serde_json::Value;

use super::{AGENT_NAME, AGENT_VERSION_VAR, CONTAINER_NAME, Defaults, RenderError};

/// A customized variable's value, if the config sets it.
pub fn variable<'a>(config: Option<&'a AddOnDeploymentConfigSpec>, name: &str) -> Option<&'a str> {
    config?
        .customized_variables
        .as_ref()?
        .iter()
        .find(|v| v.name == name)
        .and_then(|v| v.value.as_deref())
        .filter(|v| !v.is_empty())
}

/// The namespace the agent is installed in: the config's `agentInstallNamespace`, else OCM's
/// default addon namespace.
pub fn install_namespace(config: Option<&AddOnDeploymentConfigSpec>) -> String {
    config
        .and_then(|c| c.agent_install_namespace.clone())
        .filter(|n| !n.is_empty())
        .unwrap_or_else(|| names::DEFAULT_ADDON_INSTALL_NAMESPACE.to_owned())
}

/// The version a config asks for (the default when it names none).
pub fn desired_version(defaults: &Defaults, config: Option<&AddOnDeploymentConfigSpec>) -> String {
    variable(config, AGENT_VERSION_VAR)
        .unwrap_or(&defaults.version)
        .to_owned()
}

/// Applies the first registry mirror whose source is a prefix of the image.
pub fn mirror_image(image: &str, config: Option<&AddOnDeploymentConfigSpec>) -> String {
    for m in config
        .and_then(|c| c.registries.as_ref())
        .into_iter()
        .flatten()
    {
        match m.source.as_deref() {
            Some(source) if !source.is_empty() => {
                if let Some(rest) = image.strip_prefix(source) {
                    return format!("{}{rest}", m.mirror);
                }
            }
            // No source: the mirror replaces the registry host of every image.
            _ => {
                let rest = image.split_once('/').map(|(_, r)| r).unwrap_or(image);
                return format!("{}/{rest}", m.mirror.trim_end_matches('/'));
            }
        }
    }
    image.to_owned()
}

/// The resource requirements for our container: among the entries whose
/// `containerID` (`<resource>:<name>:<container>`, `*` matches anything) matches, the most
/// specific one wins (fewest wildcards; on a tie, the later entry).
pub fn container_resources(entries: &[ContainerResourceRequirements]) -> Option<Value> {
    let ours = ["deployments", AGENT_NAME, CONTAINER_NAME];
    entries
        .iter()
        .filter_map(|e| {
            let parts: Vec<&str> = e.container_id.split(':').collect();
            if parts.len() != 3 {
                return None;
            }
            let matches = parts.iter().zip(ours).all(|(p, o)| *p == "*" || *p == o);
            let specific = parts.iter().filter(|p| **p != "*").count();
            matches.then_some((specific, e))
        })
        .max_by_key(|(specific, _)| *specific)
        .and_then(|(_, e)| serde_json::to_value(&e.resources).ok())
}

/// The longest health lease an agent may be given: an hour (addon-framework's default is a
/// minute, and the manager judges a hub by five of them).
pub const MAX_LEASE_DURATION_SECS: u32 = 3600;
/// The most clusters a hub may be said to hold (a score's denominator).
pub const MAX_CAPACITY: u32 = 1_000_000;

pub(super) fn parse_u32(
    config: Option<&AddOnDeploymentConfigSpec>,
    name: &str,
    default: u32,
    max: u32,
) -> Result<u32, RenderError> {
    match variable(config, name) {
        None => Ok(default),
        Some(v) => v
            .parse::<u32>()
            .ok()
            .filter(|n| (1..=max).contains(n))
            .ok_or_else(|| {
                RenderError::Config(format!(
                    "{name} must be an integer from 1 to {max}, not \"{v}\""
                ))
            }),
    }
}
