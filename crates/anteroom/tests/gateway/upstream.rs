//! A real local upstream for the gateway tests: an axum server on 127.0.0.1:0 that echoes what
//! it received, streams and swallows large bodies without storing them, answers slowly, and
//! releases sessions with `Anteroom-Release`.

use std::net::SocketAddr;
use std::time::Duration;

use axum::Router;
use axum::body::{Body, Bytes};
use axum::extract::{Query, Request};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::{any, get, post};
use futures_util::StreamExt;

/// A running upstream; stops when dropped.
pub(crate) struct Upstream {
    pub(crate) addr: SocketAddr,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for Upstream {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl Upstream {
    pub(crate) async fn start() -> Upstream {
        let app = Router::new()
            .route("/release", get(release))
            .route("/slow", get(slow))
            .route("/big", get(big))
            .route("/upload", post(upload))
            .fallback(any(echo));
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let task = tokio::spawn(async move {
            let _ = axum::serve(listener, app).await;
        });
        Upstream { addr, task }
    }

    /// `http://127.0.0.1:<port>`.
    pub(crate) fn url(&self) -> String {
        format!("http://{}", self.addr)
    }
}

/// `{"upstream": true, "method", "path", "headers": {...}}`.
async fn echo(request: Request) -> Response {
    let headers: serde_json::Map<String, serde_json::Value> = request
        .headers()
        .iter()
        .map(|(name, value)| {
            (
                name.as_str().to_owned(),
                serde_json::Value::String(value.to_str().unwrap_or("").to_owned()),
            )
        })
        .collect();
    let body = serde_json::json!({
        "upstream": true,
        "method": request.method().as_str(),
        "path": request.uri().to_string(),
        "headers": headers,
    });
    let mut response = axum::Json(body).into_response();
    response
        .headers_mut()
        .insert("connection", "keep-alive".parse().unwrap());
    response
}

/// The origin says the visitor is done.
async fn release() -> impl IntoResponse {
    ([("anteroom-release", "1")], "released")
}

async fn slow() -> &'static str {
    tokio::time::sleep(Duration::from_secs(3)).await;
    "late"
}

#[derive(serde::Deserialize)]
struct Size {
    bytes: u64,
}

/// `bytes` bytes generated on the fly, 64 KiB at a time.
async fn big(Query(size): Query<Size>) -> Response {
    const CHUNK: usize = 64 * 1024;
    let chunk = Bytes::from(vec![b'x'; CHUNK]);
    let stream = futures_util::stream::unfold(size.bytes, move |left| {
        let chunk = chunk.clone();
        async move {
            if left == 0 {
                return None;
            }
            let take = left.min(CHUNK as u64);
            Some((
                Ok::<_, std::io::Error>(chunk.slice(..take as usize)),
                left - take,
            ))
        }
    });
    let mut response = Body::from_stream(stream).into_response();
    response
        .headers_mut()
        .insert("content-length", size.bytes.into());
    response
}

/// Counts the request body without keeping it.
async fn upload(headers: HeaderMap, body: Body) -> Response {
    let _ = headers;
    let mut stream = body.into_data_stream();
    let mut total: u64 = 0;
    while let Some(chunk) = stream.next().await {
        match chunk {
            Ok(chunk) => total += chunk.len() as u64,
            Err(_) => return StatusCode::BAD_REQUEST.into_response(),
        }
    }
    total.to_string().into_response()
}
