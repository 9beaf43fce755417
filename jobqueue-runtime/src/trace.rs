//! Trace context across the queue (feature `opentelemetry`): an enqueue stores the W3C
//! `traceparent` of the current span with the job, and the job's span continues it. The
//! first attempt is a child of the enqueuing span, so one trace runs from the request that
//! enqueued to the job; a retry starts a trace of its own with a link to the enqueuing span,
//! so that a job retried for days does not stretch the request's trace.
//!
//! Without the feature both functions do nothing and no context is stored.

/// The W3C `traceparent` (`00-<trace id>-<span id>-<flags>`) of the current span, if
/// OpenTelemetry traces it.
#[cfg(feature = "opentelemetry")]
pub(crate) fn current_traceparent() -> Option<String> {
    use opentelemetry::trace::TraceContextExt;
    use tracing_opentelemetry::OpenTelemetrySpanExt;

    let from_span = tracing::Span::current().context();
    let cx = if from_span.span().span_context().is_valid() {
        from_span
    } else {
        // Code that uses the OpenTelemetry API directly, without `tracing` spans.
        opentelemetry::Context::current()
    };
    let span = cx.span();
    let sc = span.span_context();
    sc.is_valid().then(|| {
        format!(
            "00-{}-{}-{:02x}",
            sc.trace_id(),
            sc.span_id(),
            sc.trace_flags().to_u8()
        )
    })
}

#[cfg(not(feature = "opentelemetry"))]
pub(crate) fn current_traceparent() -> Option<String> {
    None
}

/// Makes `span`, a job's span not yet entered, continue the trace of `traceparent`: as its
/// child on the first attempt, linked to it on a retry. A missing or malformed value leaves
/// the span a root of its own.
#[cfg(feature = "opentelemetry")]
pub(crate) fn continue_trace(span: &tracing::Span, traceparent: Option<&str>, attempt: u32) {
    use opentelemetry::trace::TraceContextExt;
    use tracing_opentelemetry::OpenTelemetrySpanExt;

    let Some(remote) = traceparent.and_then(parse_traceparent) else {
        return;
    };
    if attempt <= 1 {
        let parent = opentelemetry::Context::new().with_remote_span_context(remote);
        // Fails only when no OpenTelemetry layer is installed or the span is filtered out:
        // then there is no trace to continue.
        let _ = span.set_parent(parent);
    } else {
        span.add_link(remote);
    }
}

#[cfg(not(feature = "opentelemetry"))]
pub(crate) fn continue_trace(_span: &tracing::Span, _traceparent: Option<&str>, _attempt: u32) {}

/// Reads a version-00 `traceparent`; later versions keep its first four fields, so their
/// prefix is read the same way (W3C Trace Context, "versioning of traceparent").
#[cfg(feature = "opentelemetry")]
fn parse_traceparent(value: &str) -> Option<opentelemetry::trace::SpanContext> {
    use opentelemetry::trace::{SpanContext, SpanId, TraceFlags, TraceId, TraceState};

    let mut parts = value.trim().split('-');
    let version = parts.next()?;
    let (trace_id, span_id, flags) = (parts.next()?, parts.next()?, parts.next()?);
    if version.len() != 2 || version == "ff" || (version == "00" && parts.next().is_some()) {
        return None;
    }
    if trace_id.len() != 32 || span_id.len() != 16 || flags.len() != 2 {
        return None;
    }
    let sc = SpanContext::new(
        TraceId::from_hex(trace_id).ok()?,
        SpanId::from_hex(span_id).ok()?,
        TraceFlags::new(u8::from_str_radix(flags, 16).ok()? & TraceFlags::SAMPLED.to_u8()),
        true,
        TraceState::default(),
    );
    sc.is_valid().then_some(sc)
}

#[cfg(all(test, feature = "opentelemetry"))]
mod tests {
    use super::*;

    #[test]
    fn traceparent_is_read_back_as_written() {
        let sc = parse_traceparent("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01")
            .expect("valid");
        assert_eq!(
            sc.trace_id().to_string(),
            "4bf92f3577b34da6a3ce929d0e0e4736"
        );
        assert_eq!(sc.span_id().to_string(), "00f067aa0ba902b7");
        assert!(sc.is_sampled() && sc.is_remote());
    }

    #[test]
    fn malformed_or_zero_traceparents_are_ignored() {
        for bad in [
            "",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7",
            "00-00000000000000000000000000000000-00f067aa0ba902b7-01",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-0000000000000000-01",
            "ff-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-extra",
            "00-xyz92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
        ] {
            assert!(parse_traceparent(bad).is_none(), "{bad:?}");
        }
    }
}
