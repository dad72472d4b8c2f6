//! The object-store client of each URL scheme, made from a store's options and the environment.

use std::sync::Arc;

use object_store::path::Path as Key;
use object_store::{ObjectStore, RetryConfig};

use crate::error::{Error, Result};
use crate::read::RemoteOptions;

/// The option keys a store accepts, for the error that names an unknown one.
const KNOWN: &str = "endpoint, region, allow_http, access_key_id, secret_access_key, session_token, \
     virtual_hosted_style_request, skip_signature, timeout, connect_timeout, and the other keys \
     object_store accepts for the scheme";

/// The media type of every object a publish writes. An object without one is open to a server's
/// guess: SeaweedFS gzips each chunk (4 MiB by default) of an untyped upload that it takes for
/// text (no control byte in the chunk's first 512, as in most photos' pixels), and then inflates
/// the whole chunk to serve any range of it. Measured on loopback (`harness remote`, dense
/// images), typing the parts took the GET limit from 88-92 to 331-364 MiB/s.
pub const CONTENT_TYPE: &str = "application/x-zrecord";

/// The object key of `name` (`/`-separated segments) under `prefix`: each segment joined on its
/// own (`Key::join` takes one segment and would encode a `/`).
pub(super) fn key_under(prefix: &Key, name: &str) -> Key {
    name.split('/')
        .filter(|s| !s.is_empty())
        .fold(prefix.clone(), |k, s| k.join(s))
}

/// The `io::ErrorKind` of a failed request (`NotFound` above all, which callers test for).
pub(super) fn io_kind(e: &object_store::Error) -> std::io::ErrorKind {
    use std::io::ErrorKind;
    match e {
        object_store::Error::NotFound { .. } => ErrorKind::NotFound,
        object_store::Error::AlreadyExists { .. } => ErrorKind::AlreadyExists,
        object_store::Error::PermissionDenied { .. }
        | object_store::Error::Unauthenticated { .. } => ErrorKind::PermissionDenied,
        _ => ErrorKind::Other,
    }
}

/// How a failed request ended, for its error: a missing object is just that (it is not retried);
/// anything else ran out of the retry deadline or could not be retried, and `object_store`'s own
/// message says how many retries it made.
pub(super) fn ended(e: &object_store::Error, opts: &RemoteOptions) -> String {
    match e {
        object_store::Error::NotFound { .. } => format!("not found: {e}"),
        _ => format!(
            "failed (retry deadline {:?}, per-request timeout {}): {e}",
            opts.retry_timeout,
            request_timeout(opts)
        ),
    }
}

/// The per-request timeout the client applies: the `timeout` storage option, or `object_store`'s
/// default of 30 s.
fn request_timeout(opts: &RemoteOptions) -> String {
    opts.storage_options
        .iter()
        .find(|(k, _)| k.eq_ignore_ascii_case("timeout"))
        .map_or_else(|| "30s".to_string(), |(_, v)| v.clone())
}

/// The backoff between retries: decorrelated jitter (`object_store`'s) from 100 ms, at most 2 s
/// apart, so a store back from an outage is found within about 2 s and every reader of a fleet
/// does not retry in step.
fn backoff() -> object_store::BackoffConfig {
    object_store::BackoffConfig {
        init_backoff: std::time::Duration::from_millis(100),
        max_backoff: std::time::Duration::from_secs(2),
        base: 2.0,
    }
}

/// The HTTP client of every scheme: `object_store`'s, with `Retry-After` honoured up to the retry
/// deadline (`super::retry_after`).
fn honour(opts: &RemoteOptions) -> super::retry_after::RetryAfterConnector {
    super::retry_after::RetryAfterConnector {
        cap: opts.retry_timeout,
    }
}

/// The attributes of every object a publish writes: its [`CONTENT_TYPE`].
pub(super) fn typed() -> object_store::Attributes {
    object_store::Attributes::from_iter([(object_store::Attribute::ContentType, CONTENT_TYPE)])
}

/// Makes the client of `url` with `opts`: credentials and settings from the environment
/// (`AWS_*`, `GOOGLE_*`, `AZURE_*`) under the explicit options; an unknown option is an error.
/// An `upload` client of S3 sends [`CONTENT_TYPE`] on every request that sets no type of its own:
/// the parts of a multipart upload carry none otherwise (object_store types only the upload's
/// creation).
pub(super) fn build(
    url: &str,
    opts: &RemoteOptions,
    upload: bool,
) -> Result<(Arc<dyn ObjectStore>, Key)> {
    let parsed =
        url::Url::parse(url).map_err(|e| Error::invalid(format!("{url}: not a URL: {e}")))?;
    // s3://bucket/key, gs://bucket/key, az://container/key, http(s)://host/key: the key is the
    // URL's path.
    let prefix = Key::parse(parsed.path().trim_matches('/'))
        .map_err(|e| Error::invalid(format!("{url}: not an object key: {e}")))?;
    // One client per bucket and options in a process (a dataset's parts share their bucket's,
    // and its connections), made again in a forked child.
    let shared = format!(
        "{}|{}|{}|{upload}|{:?}|{}|{:?}",
        std::process::id(),
        parsed.scheme(),
        &parsed[url::Position::BeforeHost..url::Position::BeforePath],
        opts.storage_options,
        opts.max_retries,
        opts.retry_timeout
    );
    let mut clients = CLIENTS.lock().unwrap_or_else(|p| p.into_inner());
    if let Some(c) = clients.get(&shared) {
        return Ok((c.clone(), prefix));
    }
    let store = make(url, &parsed, opts, upload)?;
    if clients.len() >= MAX_CLIENTS {
        clients.clear();
    }
    clients.insert(shared, store.clone());
    Ok((store, prefix))
}

/// Most clients kept for reuse (distinct buckets and options); past it the kept ones are
/// dropped (those in use live on with their stores).
const MAX_CLIENTS: usize = 64;

/// The clients made in this process, by process id, scheme, bucket or host, whether they type
/// uploads, and options.
static CLIENTS: std::sync::LazyLock<
    std::sync::Mutex<std::collections::HashMap<String, Arc<dyn ObjectStore>>>,
> = std::sync::LazyLock::new(Default::default);

/// A new client of `url` (see [`build`]).
fn make(
    url: &str,
    parsed: &url::Url,
    opts: &RemoteOptions,
    upload: bool,
) -> Result<Arc<dyn ObjectStore>> {
    let retry = RetryConfig {
        max_retries: opts.max_retries,
        retry_timeout: opts.retry_timeout,
        backoff: backoff(),
    };
    let unknown = |k: &str| {
        Error::invalid(format!(
            "{url}: unknown storage option {k:?} (known: {KNOWN})"
        ))
    };
    let bad = |e: object_store::Error| Error::invalid(format!("{url}: {e}"));
    let scheme = parsed.scheme();
    let store: Arc<dyn ObjectStore> = match scheme {
        "s3" => {
            use object_store::aws::{AmazonS3Builder, AmazonS3ConfigKey};
            let mut b = AmazonS3Builder::new();
            if upload {
                let mut typed = object_store::HeaderMap::new();
                typed.insert(
                    "content-type",
                    object_store::HeaderValue::from_static(CONTENT_TYPE),
                );
                b = b.with_client_options(
                    object_store::ClientOptions::new().with_default_headers(typed),
                );
            }
            // As `AmazonS3Builder::from_env` reads the environment, on the client above.
            for (k, v) in std::env::vars_os() {
                if let (Some(k), Some(v)) = (k.to_str(), v.to_str())
                    && k.starts_with("AWS_")
                    && let Ok(key) = k.to_ascii_lowercase().parse::<AmazonS3ConfigKey>()
                {
                    b = b.with_config(key, v);
                }
            }
            let mut b = b
                .with_url(url)
                .with_retry(retry)
                .with_http_connector(honour(opts));
            for (k, v) in &opts.storage_options {
                let key: AmazonS3ConfigKey =
                    k.to_ascii_lowercase().parse().map_err(|_| unknown(k))?;
                b = b.with_config(key, v);
            }
            Arc::new(b.build().map_err(bad)?)
        }
        "gs" => {
            use object_store::gcp::{GoogleCloudStorageBuilder, GoogleConfigKey};
            let mut b = GoogleCloudStorageBuilder::from_env()
                .with_url(url)
                .with_retry(retry)
                .with_http_connector(honour(opts));
            for (k, v) in &opts.storage_options {
                let key: GoogleConfigKey =
                    k.to_ascii_lowercase().parse().map_err(|_| unknown(k))?;
                b = b.with_config(key, v);
            }
            Arc::new(b.build().map_err(bad)?)
        }
        "az" | "abfs" | "abfss" => {
            use object_store::azure::{AzureConfigKey, MicrosoftAzureBuilder};
            let mut b = MicrosoftAzureBuilder::from_env()
                .with_url(url)
                .with_retry(retry)
                .with_http_connector(honour(opts));
            for (k, v) in &opts.storage_options {
                let key: AzureConfigKey = k.to_ascii_lowercase().parse().map_err(|_| unknown(k))?;
                b = b.with_config(key, v);
            }
            Arc::new(b.build().map_err(bad)?)
        }
        "http" | "https" => {
            use object_store::ClientConfigKey;
            use object_store::http::HttpBuilder;
            let mut client = object_store::ClientOptions::new();
            for (k, v) in &opts.storage_options {
                let key: ClientConfigKey =
                    k.to_ascii_lowercase().parse().map_err(|_| unknown(k))?;
                client = client.with_config(key, v);
            }
            let b = HttpBuilder::new()
                .with_url(&parsed[..url::Position::BeforePath])
                .with_retry(retry)
                .with_client_options(client)
                .with_http_connector(honour(opts));
            Arc::new(b.build().map_err(bad)?)
        }
        other => {
            return Err(Error::invalid(format!(
                "{url}: scheme {other:?} is not one of {:?}",
                crate::vfs::URL_SCHEMES
            )));
        }
    };
    Ok(store)
}
