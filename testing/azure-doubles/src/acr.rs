//! Azure Container Registry with ACR Tasks: the Azure Resource Manager
//! operations that schedule and follow a quick build (api-version
//! `2019-06-01-preview`), the storage the build context is uploaded to and
//! the run logs are read from, and the registry the built images land in.
//!
//! Three loopback servers, as the real service is three hosts:
//!
//! - ARM ([`SERVICE`], `management.azure.com`), behind the [`Auth`] the
//!   test gives (an Entra token from the [`crate::TokenBook`]): under
//!   `/subscriptions/{sub}/resourceGroups/{rg}/providers/Microsoft.ContainerRegistry/registries/{name}`
//!   `POST listBuildSourceUploadUrl`, `POST scheduleRun`, `GET runs/{runId}`,
//!   `POST runs/{runId}/listLogSasUrl` (`acr/arm.rs`);
//! - the storage account ([`BLOB_SERVICE`], SAS URLs, no bearer):
//!   `PUT` of the context, `GET` of a run's log (`acr/storage.rs`);
//! - the registry's login server ([`REGISTRY_SERVICE`]): the OCI
//!   distribution API's read side and ACR's token endpoints,
//!   `POST /oauth2/exchange` (an Entra token for an ACR refresh token),
//!   `POST /oauth2/token` (a refresh token for a repository-scoped access
//!   token), `GET /oauth2/token` with the admin user (`acr/registry.rs`).
//!
//! Two backends build the runs, chosen by [`AcrConfig::backend`]:
//!
//! - [`AcrBackend::Builtin`] (the default): the double's own builder
//!   (`acr/builder.rs`), described below; the images stay in the login
//!   server's memory ([`AcrDouble::image`]);
//! - [`AcrBackend::Buildah`] ([`AcrConfig::with_buildah`]): Debian's
//!   buildah builds the run for real (`RUN`, multi-stage `COPY --from`,
//!   `arguments` as `--build-arg`, the `platform`) in a background task and
//!   pushes it to a real registry, Debian's docker-registry
//!   ([`DockerRegistry`], started by the test); the run's log is buildah's
//!   output, a failing step makes it `Failed` (`runErrorMessage` `failed
//!   during run, err: exit status <n>`), and the login server's `/v2/`
//!   reads are proxied to that registry after ACR's token check
//!   (`acr/buildah.rs`). Base images come from that registry too:
//!   [`push_busybox_base`] makes one from Debian's busybox-static.
//!
//! The builtin builder unpacks the uploaded gzipped tar, reads the Dockerfile
//! (`FROM` any base, taken as an empty root filesystem; `ARG`, `ENV`,
//! `LABEL`, `WORKDIR`, `USER`, `EXPOSE`, `CMD`, `ENTRYPOINT`; `COPY`/`ADD`
//! of context files as one layer each; `RUN` is logged and not run, but
//! `RUN exit <n>` with n ≠ 0 fails the step as a failing command would),
//! and stores an OCI image (gzipped layers, config, manifest) under every
//! name of the request in the registry, where bosun reads it back over the
//! OCI API. The same context and Dockerfile give the same digest.
//!
//! What it checks:
//!
//! - ARM: the `api-version` (`400 MissingApiVersionParameter`,
//!   `InvalidApiVersionParameter`), then the subscription, resource group
//!   and registry (`404 SubscriptionNotFound`, `ResourceGroupNotFound`,
//!   `ResourceNotFound`), in ARM's `{"error": {"code", "message"}}`;
//!   `scheduleRun` takes a `DockerBuildRequest` with `dockerFilePath` and
//!   `platform.os`, `timeout` 300 to 28800 s, `imageNames` strings (`400
//!   InvalidRequestContent` / `InvalidParameter`; other run request types
//!   `400`); an unknown run id is `404 ResourceNotFound`;
//! - storage: the SAS signature is the one issued for that blob and
//!   allows the operation (`403 AuthenticationFailed`), a `PUT` has
//!   `x-ms-blob-type: BlockBlob` (`400 MissingRequiredHeader`,
//!   `InvalidHeaderValue`), in Blob Storage's XML error shape;
//! - login server: `/oauth2/exchange` takes only a valid Entra token for
//!   ARM or the registry and the registry's own `service`; `/oauth2/token`
//!   only a refresh token it issued (or the admin user's Basic
//!   credentials); `/v2/` reads need an access token scoped to that
//!   repository with `pull` (`401` with the `WWW-Authenticate` challenge),
//!   and unknown ones are `404 MANIFEST_UNKNOWN` / `BLOB_UNKNOWN` /
//!   `NAME_UNKNOWN`;
//! - the build: the source was uploaded, the Dockerfile exists, every
//!   `COPY` source exists in the context; otherwise the run is `Failed`
//!   with a `runErrorMessage` and its log says why. With buildah: whatever
//!   buildah checks (every instruction, `RUN` exit codes, base images
//!   pulled from the registry), the push, and the request's `timeout`;
//!   the `/v2/` answers (`404 MANIFEST_UNKNOWN`, ...) are the real
//!   registry's.
//!
//! A run moves one step each time it is read (`GET runs/{runId}`):
//! `Queued` when scheduled, `Running` at the first read, then built and
//! `Succeeded` (with `outputImages`) or `Failed` (with `runErrorMessage`)
//! at the second, so a test polls it deterministically. With buildah the
//! first read starts the build, and the run stays `Running` until buildah
//! is done, however often it is read.

mod arm;
mod buildah;
mod builder;
mod docker_registry;
mod registry;
mod storage;

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex};

use crate::serve::lock;
use crate::{Auth, Faults, Journal, Running, ServeError, TokenBook, serve};

pub use buildah::{BUILDAH, BuildahConfig};
pub use builder::{BuildOutcome, BuiltImage};
pub use docker_registry::{BUSYBOX, DOCKER_REGISTRY, DockerRegistry, ToolError, missing_tools, push_busybox_base};
pub use registry::Image;

/// The ARM double's name in the journal and fault rules.
pub const SERVICE: &str = "acr";
/// The storage (SAS URL) double's name.
pub const BLOB_SERVICE: &str = "acr-blob";
/// The registry (login server) double's name.
pub const REGISTRY_SERVICE: &str = "acr-registry";

/// The only api-version the ARM double serves.
pub const API_VERSION: &str = "2019-06-01-preview";

/// The registry resource the double holds.
#[derive(Debug, Clone)]
pub struct AcrConfig {
    /// Its subscription id.
    pub subscription: String,
    /// Its resource group.
    pub resource_group: String,
    /// Its resource name (`contoso`).
    pub registry_name: String,
    /// Its login server (`contoso.azurecr.io`): the token `service` and
    /// the `registry` of `outputImages`.
    pub login_server: String,
    /// The Entra tokens `/oauth2/exchange` accepts; `None` refuses every
    /// exchange.
    pub entra: Option<TokenBook>,
    /// The admin user (`GET /oauth2/token` with Basic auth), when enabled.
    pub admin: Option<(String, String)>,
    /// What builds the runs and where their images land.
    pub backend: AcrBackend,
}

/// What builds a run and where its images land.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub enum AcrBackend {
    /// The double's own builder (`RUN` not run, `FROM` empty), the images
    /// kept in the login server's memory ([`AcrDouble::image`]).
    #[default]
    Builtin,
    /// Debian's buildah builds the run (`RUN`, multi-stage) and pushes it
    /// to the real registry [`BuildahConfig::registry`] (a
    /// [`DockerRegistry`]); the login server's `/v2/` reads are proxied
    /// there after ACR's token check, and [`AcrDouble::image`] sees
    /// nothing (read the registry itself).
    Buildah(BuildahConfig),
}

impl AcrConfig {
    /// The registry `registry_name` (login server
    /// `<registry_name>.azurecr.io`) of `resource_group` in `subscription`,
    /// without the admin user or Entra exchange.
    pub fn new(subscription: &str, resource_group: &str, registry_name: &str) -> Self {
        Self {
            subscription: subscription.to_owned(),
            resource_group: resource_group.to_owned(),
            registry_name: registry_name.to_owned(),
            login_server: format!("{registry_name}.azurecr.io"),
            entra: None,
            admin: None,
            backend: AcrBackend::Builtin,
        }
    }

    /// This registry, its runs built by buildah and pushed to `buildah`'s
    /// registry ([`AcrBackend::Buildah`]).
    pub fn with_buildah(mut self, buildah: BuildahConfig) -> Self {
        self.backend = AcrBackend::Buildah(buildah);
        self
    }
}

/// Where a run is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RunStatus {
    /// Scheduled, not read yet.
    Queued,
    /// Read once.
    Running,
    /// Built, its images in the registry.
    Succeeded,
    /// The build failed.
    Failed,
}

impl RunStatus {
    fn as_str(self) -> &'static str {
        match self {
            Self::Queued => "Queued",
            Self::Running => "Running",
            Self::Succeeded => "Succeeded",
            Self::Failed => "Failed",
        }
    }
}

/// A run as a test reads it.
#[derive(Debug, Clone)]
pub struct Run {
    /// `cb1`, `cb2`, ...
    pub run_id: String,
    /// Where it is.
    pub status: RunStatus,
    /// The `DockerBuildRequest` it was scheduled with.
    pub request: serde_json::Value,
    /// The images it pushed (when it succeeded).
    pub output_images: Vec<BuiltImage>,
    /// Why it failed.
    pub error_message: Option<String>,
    /// Its log so far.
    pub log: String,
    pub(crate) create_time: String,
    pub(crate) start_time: Option<String>,
    pub(crate) finish_time: Option<String>,
}

/// A SAS the storage double accepts: the blob path it signs and its
/// signature.
#[derive(Debug, Clone)]
struct Sas {
    signature: String,
    write: bool,
}

#[derive(Debug)]
struct AcrState {
    config: AcrConfig,
    blob_base: String,
    /// Blob path (`/<container>/<name>`) → the SAS issued for it.
    sas: HashMap<String, Sas>,
    /// Blob path → bytes uploaded.
    blobs: HashMap<String, Vec<u8>>,
    runs: BTreeMap<u64, Run>,
    next_run: u64,
    registry: registry::Store,
    /// Whether `scheduleRun` answers as a long-running operation (`202`).
    schedule_accepted: bool,
    /// Operation id → (the run's number, reads of it still answered `202`).
    operations: HashMap<String, (u64, u32)>,
    /// The buildah backend's work folder (storage, contexts, its
    /// configuration), removed with the double.
    buildah_work: Option<Arc<tempfile::TempDir>>,
    /// The client the login server proxies `/v2/` reads with (buildah
    /// backend).
    http: reqwest::Client,
}

type Shared = Arc<Mutex<AcrState>>;

/// The ACR double; dropping it stops its three servers.
#[derive(Debug)]
pub struct AcrDouble {
    arm: Running,
    blob: Running,
    registry: Running,
    state: Shared,
}

impl AcrDouble {
    /// Serves the registry `config` names: ARM behind `auth`, the storage
    /// and login server behind their own checks (SAS signatures, ACR
    /// tokens).
    pub async fn start(faults: Faults, journal: Journal, auth: Auth, config: AcrConfig) -> Result<Self, ServeError> {
        let buildah_work = match &config.backend {
            AcrBackend::Builtin => None,
            AcrBackend::Buildah(buildah) => {
                let work = tempfile::Builder::new()
                    .prefix("bosun-acr-buildah.")
                    .tempdir()
                    .and_then(|work| buildah::prepare(work.path(), buildah).map(|()| work))
                    .map_err(|source| ServeError::Io {
                        service: SERVICE,
                        what: "preparing buildah's work folder",
                        source,
                    })?;
                Some(Arc::new(work))
            }
        };
        let state: Shared = Arc::new(Mutex::new(AcrState {
            config,
            blob_base: String::new(),
            sas: HashMap::new(),
            blobs: HashMap::new(),
            runs: BTreeMap::new(),
            next_run: 1,
            registry: registry::Store::default(),
            schedule_accepted: false,
            operations: HashMap::new(),
            buildah_work,
            http: reqwest::Client::new(),
        }));
        let blob = serve(
            BLOB_SERVICE,
            storage::router(state.clone()),
            faults.clone(),
            journal.clone(),
            Auth::open(),
        )
        .await?;
        lock(&state).blob_base = blob.base_url();
        let registry = serve(
            REGISTRY_SERVICE,
            registry::router(state.clone()),
            faults.clone(),
            journal.clone(),
            Auth::open(),
        )
        .await?;
        let arm = serve(SERVICE, arm::router(state.clone()), faults, journal, auth).await?;
        Ok(Self {
            arm,
            blob,
            registry,
            state,
        })
    }

    /// ARM's base URL (`arm_endpoint` of bosun's configuration, `base_url`
    /// of Microsoft's management client).
    pub fn base_url(&self) -> String {
        self.arm.base_url()
    }

    /// The login server's base URL (bosun's registry `endpoint`).
    pub fn registry_url(&self) -> String {
        self.registry.base_url()
    }

    /// The storage account's base URL (where SAS URLs point).
    pub fn blob_url(&self) -> String {
        self.blob.base_url()
    }

    /// The ARM server (its journal and faults).
    pub fn arm(&self) -> &Running {
        &self.arm
    }

    /// The login server the images are named under (`contoso.azurecr.io`).
    pub fn login_server(&self) -> String {
        lock(&self.state).config.login_server.clone()
    }

    /// The registry's ARM resource path.
    pub fn resource_path(&self) -> String {
        arm::resource_path(&lock(&self.state).config)
    }

    /// From now on `scheduleRun` answers as ARM's long-running operations
    /// may (the API declares `200` and `202`): `202 Accepted` with no body,
    /// `Location` naming an operation result that answers `202` once, then
    /// `200` with the `Run`.
    pub fn answer_schedule_accepted(&self, accepted: bool) {
        lock(&self.state).schedule_accepted = accepted;
    }

    /// Every run, in the order they were scheduled.
    pub fn runs(&self) -> Vec<Run> {
        lock(&self.state).runs.values().cloned().collect()
    }

    /// How many contexts were uploaded.
    pub fn uploads(&self) -> usize {
        lock(&self.state)
            .blobs
            .keys()
            .filter(|path| path.starts_with(&format!("/{}/", storage::SOURCE_CONTAINER)))
            .count()
    }

    /// The image `reference` (a tag or a digest) names in `repository`.
    pub fn image(&self, repository: &str, reference: &str) -> Option<Image> {
        lock(&self.state).registry.image(repository, reference)
    }

    /// The tags of `repository`, sorted.
    pub fn tags(&self, repository: &str) -> Vec<String> {
        lock(&self.state).registry.tags(repository)
    }

    /// How many distinct manifests the registry holds.
    pub fn manifests(&self) -> usize {
        lock(&self.state).registry.manifest_count()
    }
}
