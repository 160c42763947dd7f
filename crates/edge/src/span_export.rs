//! Span export over OTLP/HTTP (SPEC §14.6, `[tracing] otlp_endpoint`): one span per request to
//! the protected site, in the trace of a trusted proxy's valid `traceparent` (or a new trace;
//! `gateway/correlation.rs` decides which is believed), exported in batches by the
//! OpenTelemetry SDK's own thread with JSON bodies. The span's id is the parent the upstream
//! is told. Without the key there is no [`SpanExport`], and no span is made.
//!
//! Sampling follows the parent: a trusted proxy's trace whose `traceparent` says "not
//! sampled" is not exported (its ids still reach the upstream); a trace the node starts, which
//! is every trace of an untrusted client, is. So a client cannot hide its own requests from
//! the export.
//!
//! The binary starts and shuts the exporter down off the runtime's threads: its HTTP client is
//! a blocking one, which must not be made or dropped on them.

use std::time::Duration;

use opentelemetry::trace::{
    Span as _, SpanContext, SpanId, SpanKind, Status, TraceContextExt as _, TraceFlags, TraceId,
    TraceState, Tracer as _, TracerProvider as _,
};
use opentelemetry::{Context, KeyValue};
use opentelemetry_otlp::{Protocol, WithExportConfig as _};
use opentelemetry_sdk::Resource;
use opentelemetry_sdk::trace::{SdkTracerProvider, Span, Tracer};

use crate::access_log::Decided;
use crate::correlation::TraceParent;

/// How long an export may take before it is given up.
const EXPORT_TIMEOUT: Duration = Duration::from_secs(10);

/// The span exporter cannot be built.
#[derive(Debug, thiserror::Error)]
#[error("the OTLP span exporter cannot be built: {0}")]
pub struct SpanExportError(String);

/// The tracer whose spans go to the OTLP endpoint; cheap to clone.
#[derive(Clone)]
pub struct SpanExport {
    provider: SdkTracerProvider,
    tracer: Tracer,
}

impl std::fmt::Debug for SpanExport {
    fn fmt(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        formatter.debug_struct("SpanExport").finish_non_exhaustive()
    }
}

impl SpanExport {
    /// Spans to `endpoint` (the full traces URL), batched by the SDK's thread.
    pub fn start(endpoint: &str) -> Result<SpanExport, SpanExportError> {
        let exporter = opentelemetry_otlp::SpanExporter::builder()
            .with_http()
            .with_protocol(Protocol::HttpJson)
            .with_endpoint(endpoint)
            .with_timeout(EXPORT_TIMEOUT)
            .build()
            .map_err(|error| SpanExportError(error.to_string()))?;
        let resource = Resource::builder_empty()
            .with_service_name("anteroom")
            .build();
        let provider = SdkTracerProvider::builder()
            .with_batch_exporter(exporter)
            .with_resource(resource)
            .build();
        let tracer = provider.tracer("anteroom");
        Ok(SpanExport { provider, tracer })
    }

    /// Sends the spans not sent yet and stops the export (at shutdown).
    pub fn shutdown(&self) {
        if let Err(error) = self.provider.shutdown() {
            tracing::warn!(%error, "spans not exported at shutdown");
        }
    }

    /// The span of a request: a child of the trusted proxy's `received` trace context, else a
    /// root.
    pub(crate) fn request_span(
        &self,
        received: Option<&TraceParent>,
        method: &str,
        path: &str,
    ) -> RequestSpan {
        let parent = match received {
            Some(received) => Context::new().with_remote_span_context(SpanContext::new(
                TraceId::from_bytes(received.trace_id.to_be_bytes()),
                SpanId::from_bytes(received.parent_id.to_be_bytes()),
                TraceFlags::new(received.flags),
                true,
                TraceState::default(),
            )),
            None => Context::new(),
        };
        let span = self
            .tracer
            .span_builder(format!("{method} {path}"))
            .with_kind(SpanKind::Server)
            .with_attributes([
                KeyValue::new("http.request.method", method.to_owned()),
                KeyValue::new("url.path", path.to_owned()),
            ])
            .start_with_context(&self.tracer, &parent);
        RequestSpan { span }
    }
}

/// A request's span, ended by [`finish`](Self::finish).
pub(crate) struct RequestSpan {
    span: Span,
}

impl RequestSpan {
    /// The trace context the upstream gets: this span as its parent.
    pub(crate) fn trace_parent(&self) -> TraceParent {
        let context = self.span.span_context();
        TraceParent {
            trace_id: u128::from_be_bytes(context.trace_id().to_bytes()),
            parent_id: u64::from_be_bytes(context.span_id().to_bytes()),
            flags: context.trace_flags().to_u8(),
        }
    }

    /// Ends the span with the response's status and the gateway's decision.
    pub(crate) fn finish(mut self, request_id: &str, status: u16, decided: Option<&Decided>) {
        self.span.set_attribute(KeyValue::new(
            "http.response.status_code",
            i64::from(status),
        ));
        self.span
            .set_attribute(KeyValue::new("anteroom.request_id", request_id.to_owned()));
        if let Some(decided) = decided {
            self.span.set_attribute(KeyValue::new(
                "anteroom.decision",
                decided.decision.as_str(),
            ));
            if let Some(room) = &decided.room {
                self.span
                    .set_attribute(KeyValue::new("anteroom.room", room.to_string()));
            }
        }
        if status >= 500 {
            self.span.set_status(Status::error(""));
        }
        self.span.end();
    }
}
