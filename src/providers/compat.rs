//! OpenAI-compatible providers: specs only (names and detection), no
//! adapter of their own; their responses go to `openai::WIRE`.

use std::borrow::Cow;

use super::spec::{ProviderSpec, never_path, never_response, no_model};
use super::{ProviderKind, openai, percent_decode};

/// A server that speaks OpenAI's API and is told apart only by
/// configuration: one registry line each.
pub const fn openai_compatible(
    kind: ProviderKind,
    name: &'static str,
    config_name: &'static str,
) -> ProviderSpec {
    ProviderSpec {
        kind,
        name,
        config_name,
        detect_path: never_path,
        detect_response: never_response,
        model_from_path: no_model,
        wire: &openai::WIRE,
        price_table: None,
    }
}

/// Azure OpenAI: OpenAI's endpoints under `/deployments/{deployment}/`.
pub const AZURE: ProviderSpec = ProviderSpec {
    detect_path: |path, operation| openai::WIRE.owns(operation) && path.contains("/deployments/"),
    model_from_path: deployment,
    ..openai_compatible(ProviderKind::Azure, "azure.ai.openai", "azure").priced_as("azure")
};

/// The deployment name in `/deployments/{deployment}/...`: Azure's model.
fn deployment(path: &str) -> Option<Option<Cow<'_, str>>> {
    let i = path.find("/deployments/")?;
    let rest = &path[i + "/deployments/".len()..];
    let (name, _) = rest.split_once('/')?;
    Some((!name.is_empty()).then(|| percent_decode(name)))
}
