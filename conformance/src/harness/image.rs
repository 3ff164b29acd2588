//! Which image the container backend runs, and building one when no registry answers (R-HAR-5).
//!
//! The default is the official `temporalio/temporal` image at the pinned CLI version. Machines
//! behind a firewall, and CI runners without registry access, cannot pull it; there the harness
//! builds an equivalent image from the same pinned CLI the process backend uses ([`find_cli`]):
//! the CLI is one statically linked Go binary, so an image `FROM scratch` holding only that
//! binary runs the dev server. No registry, no base image, a few seconds to build.
//!
//! An image named explicitly ([`super::IMAGE_ENV`]) is used as given: if it cannot be pulled,
//! that is an error, not a silent substitute.

use std::path::Path;

use testcontainers::{
    GenericBuildableImage, GenericImage,
    core::BuildImageOptions,
    runners::{AsyncBuilder, AsyncRunner},
};

use super::{DEFAULT_IMAGE, HarnessError, ServerVersion, cli::find_cli};

/// Repository of the images the harness builds itself; the tag is the CLI version.
pub const LOCAL_IMAGE_REPOSITORY: &str = "durable-mcp/temporal-dev";

/// Where the binary lives in the built image; `PATH` points there so `temporal --version` runs
/// through `docker exec` as it does in the official image.
const BIN_DIR: &str = "/usr/local/bin";

/// The Dockerfile of the built image.
///
/// `USER` must be set: without cgo, Go's `user.Current` needs it and the server exits at start.
/// `HOME=/tmp` and an (almost) empty `/tmp` give the CLI a home. The container may run as the
/// host user (so a bind-mounted database stays theirs): the binary is world-executable.
pub(crate) fn dockerfile() -> String {
    format!(
        "FROM scratch\n\
         COPY temporal {BIN_DIR}/temporal\n\
         COPY tmp /tmp\n\
         ENV USER=temporal HOME=/tmp PATH={BIN_DIR}\n\
         ENTRYPOINT [\"{BIN_DIR}/temporal\"]\n"
    )
}

/// Splits `repo[:tag]` at the tag colon (not a registry port colon); no tag means `latest`.
pub(crate) fn split_image(image: &str) -> (&str, &str) {
    match image.rsplit_once(':') {
        Some((name, tag)) if !tag.contains('/') => (name, tag),
        _ => (image, "latest"),
    }
}

/// The tag of the image built from a CLI of this version.
pub(crate) fn local_image(version: &ServerVersion) -> String {
    format!("{LOCAL_IMAGE_REPOSITORY}:{}", version.cli)
}

/// Returns the image to run: `configured` when it is present or can be pulled; for the default
/// image, otherwise, one built from the pinned CLI.
pub(crate) async fn resolve(configured: &str) -> Result<String, HarnessError> {
    if configured != DEFAULT_IMAGE || present(configured).await {
        // An explicit image is pulled (or not) by the container start, which reports failures.
        return Ok(configured.to_owned());
    }
    let (name, tag) = split_image(configured);
    let pull_error = match GenericImage::new(name, tag).pull_image().await {
        Ok(_) => return Ok(configured.to_owned()),
        Err(e) => e.to_string(),
    };
    let (cli, version) = tokio::task::spawn_blocking(find_cli)
        .await
        .map_err(|e| HarnessError::Container(format!("looking for the Temporal CLI: {e}")))??;
    let local = local_image(&version);
    if !present(&local).await {
        eprintln!(
            "durable-mcp harness: cannot pull {configured} ({}); building {local} from {}",
            first_line(&pull_error),
            cli.display()
        );
    }
    build(&cli, &local).await?;
    Ok(local)
}

/// Whether the engine already has `image`.
async fn present(image: &str) -> bool {
    match testcontainers::core::client::docker_client_instance().await {
        Ok(docker) => docker.inspect_image(image).await.is_ok(),
        Err(_) => false,
    }
}

/// Builds `tag` from the CLI binary at `cli`, unless the engine has it already.
async fn build(cli: &Path, tag: &str) -> Result<(), HarnessError> {
    let (name, version) = split_image(tag);
    // An empty directory cannot travel in the build context; a marker file keeps `/tmp`.
    let _built = GenericBuildableImage::new(name, version)
        .with_dockerfile_string(dockerfile())
        .with_file(cli, "temporal")
        .with_data(Vec::new(), "tmp/.keep")
        .build_image_with(BuildImageOptions::new().with_skip_if_exists(true))
        .await
        .map_err(|e| {
            HarnessError::Container(format!(
                "building {tag} from {}: {e}; set DURABLE_MCP_TEMPORAL_IMAGE to an image the \
                 engine can pull, or use DURABLE_MCP_TEMPORAL=process",
                cli.display()
            ))
        })?;
    Ok(())
}

fn first_line(text: &str) -> &str {
    text.lines().next().unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn built_image_is_tagged_by_cli_version() {
        let v = ServerVersion {
            cli: "1.9.1".into(),
            server: "1.32.0".into(),
        };
        assert_eq!(local_image(&v), "durable-mcp/temporal-dev:1.9.1");
    }

    #[test]
    fn dockerfile_holds_only_the_cli() {
        let d = dockerfile();
        assert!(d.starts_with("FROM scratch\n"), "{d}");
        assert!(d.contains("ENV USER=temporal HOME=/tmp"), "{d}");
        assert!(
            d.contains("ENTRYPOINT [\"/usr/local/bin/temporal\"]"),
            "{d}"
        );
        assert_eq!(d.matches("COPY").count(), 2, "{d}");
    }

    #[test]
    fn splits_image_references() {
        assert_eq!(
            split_image("temporalio/temporal:1.9.1"),
            ("temporalio/temporal", "1.9.1")
        );
        assert_eq!(
            split_image("temporalio/temporal"),
            ("temporalio/temporal", "latest")
        );
        assert_eq!(
            split_image("localhost:5000/temporal"),
            ("localhost:5000/temporal", "latest")
        );
        assert_eq!(
            split_image("localhost:5000/temporal:1.9.1"),
            ("localhost:5000/temporal", "1.9.1")
        );
    }
}
