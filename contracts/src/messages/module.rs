//! Module metadata: what a deployable module is and how to build, test,
//! package and containerize it.
//!
//! [`ModuleMetadata`] travels with the pipeline run from generation to
//! [`BuildCompleted`](super::BuildCompleted), so container build and package
//! publishing find their settings on the message instead of reading the
//! repository again.

use std::collections::BTreeMap;

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::schema_rules as rule;
use crate::validate::{self, FieldError, Validate};

/// Longest build or test command accepted.
pub const MAX_COMMAND_CHARS: usize = 4096;
/// Longest module name.
pub const MAX_MODULE_NAME_CHARS: usize = 128;
/// Longest target platform, e.g. `linux/amd64`.
pub const MAX_PLATFORM_CHARS: usize = 64;

/// The toolchain of a module; it picks the pipeline template.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub enum ModuleLanguage {
    /// .NET (`dotnet build`, NuGet packages).
    Dotnet,
    /// Node.js.
    Node,
    /// Python.
    Python,
    /// Go.
    Go,
    /// Java (Maven or Gradle).
    Java,
    /// Rust (Cargo).
    Rust,
    /// No language template: the pipeline runs `buildCommand` and
    /// `testCommand` exactly as given.
    Other,
}

/// How a module is packed and pushed as a NuGet package.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct PackageSettings {
    /// NuGet package id, e.g. `Contoso.Payments.Client`.
    #[schemars(transform = rule::nuget_package_id)]
    pub package_id: String,
    /// Feed to push to (an Azure Artifacts feed name, or the local folder
    /// feed's name).
    #[schemars(transform = rule::identifier)]
    pub feed: String,
    /// Project or `.nuspec` file to pack, relative to the module's `path`;
    /// the module's only project when absent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(transform = rule::repository_path)]
    pub project: Option<String>,
}

impl Validate for PackageSettings {
    fn validate(&self) -> Result<(), FieldError> {
        validate::nuget_package_id("packageId", &self.package_id)?;
        validate::identifier("feed", &self.feed)?;
        if let Some(project) = &self.project {
            validate::repository_path("project", project)?;
        }
        Ok(())
    }
}

fn default_dockerfile() -> String {
    "Dockerfile".to_owned()
}

fn default_platform() -> String {
    "linux/amd64".to_owned()
}

/// How a module is built and pushed as an OCI image.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ContainerSettings {
    /// Registry host, e.g. `contoso.azurecr.io` (`localhost` names the local
    /// OCI layout).
    #[schemars(transform = rule::registry_host)]
    pub registry: String,
    /// Image repository inside the registry, e.g. `contoso/payments-api`.
    #[schemars(transform = rule::oci_repository)]
    pub image: String,
    /// Dockerfile, relative to the module's `path`; `Dockerfile` when absent.
    #[serde(default = "default_dockerfile")]
    #[schemars(transform = rule::repository_path)]
    pub dockerfile: String,
    /// Build context, relative to the module's `path`; the module directory
    /// when absent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(transform = rule::repository_path)]
    pub context: Option<String>,
    /// Target platform, e.g. `linux/amd64` (the default) or `linux/arm64`.
    #[serde(default = "default_platform")]
    #[schemars(transform = rule::text(MAX_PLATFORM_CHARS))]
    pub platform: String,
    /// `--build-arg` values. Never put secrets here: messages are logged and
    /// kept in dead letters.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    #[schemars(transform = rule::keys(rule::identifier))]
    pub build_args: BTreeMap<String, String>,
}

impl Validate for ContainerSettings {
    fn validate(&self) -> Result<(), FieldError> {
        validate::registry_host("registry", &self.registry)?;
        validate::oci_repository("image", &self.image)?;
        validate::repository_path("dockerfile", &self.dockerfile)?;
        if let Some(context) = &self.context {
            validate::repository_path("context", context)?;
        }
        validate::text("platform", &self.platform, MAX_PLATFORM_CHARS)?;
        for name in self.build_args.keys() {
            validate::identifier(&format!("buildArgs.{name}"), name)?;
        }
        Ok(())
    }
}

/// A deployable module of a repository and how to build, test, package and
/// containerize it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ModuleMetadata {
    /// Stable id of the module, unique within the tenant, e.g. `payments-api`.
    #[schemars(transform = rule::identifier)]
    pub module_id: String,
    /// Human-readable name.
    #[schemars(transform = rule::text(MAX_MODULE_NAME_CHARS))]
    pub name: String,
    /// Toolchain; picks the pipeline template.
    pub language: ModuleLanguage,
    /// The module's version (semantic version), stamped on packages and
    /// images.
    #[schemars(transform = rule::semantic_version)]
    pub version: String,
    /// Directory of the module inside the repository; the root when absent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(transform = rule::repository_path)]
    pub path: Option<String>,
    /// Shell command that builds the module, run in `path`.
    #[schemars(transform = rule::text(MAX_COMMAND_CHARS))]
    pub build_command: String,
    /// Shell command that runs the tests; no test step when absent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(transform = rule::text(MAX_COMMAND_CHARS))]
    pub test_command: Option<String>,
    /// Glob of the JUnit XML files the test command writes, relative to
    /// `path`, e.g. `TestResults/*.xml`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(transform = rule::repository_path)]
    pub test_results: Option<String>,
    /// NuGet packaging; the module publishes no package when absent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub package: Option<PackageSettings>,
    /// Container image; the module builds no image when absent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub container: Option<ContainerSettings>,
}

impl Validate for ModuleMetadata {
    fn validate(&self) -> Result<(), FieldError> {
        validate::identifier("moduleId", &self.module_id)?;
        validate::text("name", &self.name, MAX_MODULE_NAME_CHARS)?;
        validate::semantic_version("version", &self.version)?;
        if let Some(path) = &self.path {
            validate::repository_path("path", path)?;
        }
        validate::text("buildCommand", &self.build_command, MAX_COMMAND_CHARS)?;
        if let Some(command) = &self.test_command {
            validate::text("testCommand", command, MAX_COMMAND_CHARS)?;
        }
        if let Some(glob) = &self.test_results {
            validate::repository_path("testResults", glob)?;
        }
        if let Some(package) = &self.package {
            package.validate().map_err(|err| validate::nested("package", err))?;
        }
        if let Some(container) = &self.container {
            container.validate().map_err(|err| validate::nested("container", err))?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::samples;

    #[test]
    fn the_sample_is_valid() {
        assert_eq!(samples::module().validate(), Ok(()));
    }

    #[test]
    fn bad_fields_are_named() {
        let mut module = samples::module();
        module.version = "1.4".into();
        assert_eq!(module.validate().unwrap_err().field, "version");

        let mut module = samples::module();
        module.build_command = " ".into();
        assert_eq!(module.validate().unwrap_err().field, "buildCommand");

        let mut module = samples::module();
        if let Some(container) = module.container.as_mut() {
            container.image = "Contoso/Payments".into();
        }
        assert_eq!(module.validate().unwrap_err().field, "container.image");

        let mut module = samples::module();
        if let Some(package) = module.package.as_mut() {
            package.package_id = "Contoso..Payments".into();
        }
        assert_eq!(module.validate().unwrap_err().field, "package.packageId");
    }

    #[test]
    fn container_defaults_apply_when_absent() {
        let settings: ContainerSettings =
            serde_json::from_value(serde_json::json!({"registry": "localhost:5000", "image": "payments-api"})).unwrap();
        assert_eq!(settings.dockerfile, "Dockerfile");
        assert_eq!(settings.platform, "linux/amd64");
        assert_eq!(settings.validate(), Ok(()));
    }
}
