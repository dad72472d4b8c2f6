//! `Retry-After` honoured: `object_store` retries a `503 SlowDown` or `429` after its own backoff
//! (100 ms to 2 s here) whatever the server asked for. This HTTP client wraps the one
//! `object_store` would make and, on either status with a `Retry-After` of delta-seconds, waits
//! that long (at most the store's retry deadline) before handing the response back, so the retry
//! that follows comes no sooner than the server asked. The wait counts against the retry
//! deadline like any backoff. An HTTP-date `Retry-After` (rare on object stores) is not parsed:
//! the backoff alone applies.

use std::time::Duration;

use object_store::ClientOptions;
use object_store::client::{
    HttpClient, HttpConnector, HttpError, HttpRequest, HttpResponse, HttpService, ReqwestConnector,
};

/// Makes [`RetryAfter`] clients; `cap` bounds one wait.
#[derive(Debug)]
pub(super) struct RetryAfterConnector {
    pub(super) cap: Duration,
}

impl HttpConnector for RetryAfterConnector {
    fn connect(&self, options: &ClientOptions) -> object_store::Result<HttpClient> {
        let inner = ReqwestConnector::default().connect(options)?;
        Ok(HttpClient::new(RetryAfter {
            inner,
            cap: self.cap,
        }))
    }
}

/// The wrapped client.
#[derive(Debug)]
struct RetryAfter {
    inner: HttpClient,
    cap: Duration,
}

#[async_trait::async_trait]
impl HttpService for RetryAfter {
    async fn call(&self, req: HttpRequest) -> Result<HttpResponse, HttpError> {
        let resp = self.inner.execute(req).await?;
        if matches!(resp.status().as_u16(), 429 | 503)
            && let Some(wait) = resp
                .headers()
                .get("retry-after")
                .and_then(|v| v.to_str().ok())
                .and_then(delta_seconds)
        {
            tokio::time::sleep(wait.min(self.cap)).await;
        }
        Ok(resp)
    }
}

/// A `Retry-After` of delta-seconds (`"2"`), or `None`.
fn delta_seconds(v: &str) -> Option<Duration> {
    v.trim().parse::<u64>().ok().map(Duration::from_secs)
}

#[cfg(test)]
mod tests {
    #[test]
    fn delta_seconds_only() {
        use std::time::Duration;
        assert_eq!(super::delta_seconds(" 3 "), Some(Duration::from_secs(3)));
        assert_eq!(super::delta_seconds("Wed, 21 Oct 2015 07:28:00 GMT"), None);
        assert_eq!(super::delta_seconds("-1"), None);
    }
}
