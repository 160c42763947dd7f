//! The request check of the own loop, in front of hyper's HTTP/1 connections.
//!
//! hyper reads a request with `Content-Length` beside `Transfer-Encoding` its own way: it
//! drops the length before its service sees the request, serves the body as chunked and closes
//! the connection afterwards. Nothing can be smuggled that way, but the request is served,
//! where the own loop refuses it with 400 (SPEC §14.4 wants both engines to refuse it). The
//! service cannot tell, so the check happens on the bytes: [`Sentry`] reads the connection
//! for hyper, holds each request head back until it is complete, checks it with the codec
//! (`take_head`, which applies `check_request`), and only then lets hyper read it. The body
//! after a head passes through as it comes, counted by its length or its chunks, so the sentry
//! knows where the next head starts. A refused head is never shown to hyper: once hyper owes no
//! answer it reads the end of the connection there, and when it shuts the connection down the
//! sentry writes the refusal (the same answer the own loop writes) first.
//!
//! HTTP/2 (its preface) and anything after an upgrade or `CONNECT` pass through unread (an
//! upgrade hyper does not switch to ends its connection after its answer: `server.rs`). A
//! chunked body the codec cannot read (a broken coding, or one hyper would read past the
//! codec's bounds: a chunk size padded beyond 15 digits, a line over 4 KiB, trailers or
//! extensions over 16 KiB) ends the connection there: hyper reads its end at once, so the
//! request fails, and no byte after it is read unchecked.

use std::io;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll, ready};

use bytes::{Buf as _, BytesMut};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};

use anteroom_h1::{ChunkedDecoder, Decoded, RequestHead, take_head};

use super::client_io::InFlight;
use axum::http::Method;
use axum::http::header::{CONTENT_LENGTH, TRANSFER_ENCODING, UPGRADE};

/// HTTP/2's connection preface, which opens an h2c connection.
const HTTP2_PREFACE: &[u8] = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";

/// How much is read from the client at a time.
const READ_STEP: usize = 8 * 1024;

/// A client connection as hyper reads it (see the module documentation).
pub(crate) struct Sentry<S> {
    inner: S,
    /// The requests hyper is answering on this connection.
    requests: Arc<InFlight>,
    /// Bytes read from the client and not yet checked: a head in the making.
    unchecked: BytesMut,
    /// Checked bytes hyper has not read yet.
    checked: BytesMut,
    reading: Reading,
    /// Whether no request has been seen yet (an HTTP/2 preface can only come first).
    first: bool,
    /// The answer to a refused head and how much of it is written.
    refusal: Option<(&'static [u8], usize)>,
}

/// Where in the stream of requests the sentry is.
enum Reading {
    /// At a request head.
    Head,
    /// Inside a body with this many bytes left.
    Length(u64),
    /// Inside a chunked body.
    Chunked(ChunkedDecoder),
    /// Not HTTP/1 requests any more (HTTP/2, an upgrade, `CONNECT`).
    PassThrough,
    /// A head was refused: hyper reads the end of the connection.
    Refused,
    /// A chunked body the codec cannot read: hyper reads the end of the connection at once
    /// (the request it is reading fails), and nothing after it.
    Cut,
}

impl<S> Sentry<S> {
    pub(crate) fn new(inner: S, requests: Arc<InFlight>) -> Sentry<S> {
        Sentry {
            inner,
            requests,
            unchecked: BytesMut::new(),
            checked: BytesMut::new(),
            reading: Reading::Head,
            first: true,
            refusal: None,
        }
    }

    /// Moves what can be checked from `unchecked` to `checked`.
    fn check(&mut self) {
        while !self.unchecked.is_empty() {
            match &mut self.reading {
                Reading::Head => {
                    if !self.check_head() {
                        return;
                    }
                }
                Reading::Length(left) => {
                    let take = usize::try_from(*left)
                        .unwrap_or(usize::MAX)
                        .min(self.unchecked.len());
                    *left -= take as u64;
                    if *left == 0 {
                        self.reading = Reading::Head;
                    }
                    let body = self.unchecked.split_to(take);
                    self.checked.extend_from_slice(&body);
                }
                Reading::Chunked(decoder) => {
                    match pass_chunks(decoder, &mut self.unchecked, &mut self.checked) {
                        Chunks::Unfinished => return,
                        Chunks::Ended => self.reading = Reading::Head,
                        Chunks::Broken => {
                            self.reading = Reading::Cut;
                            self.unchecked.clear();
                            return;
                        }
                    }
                }
                Reading::PassThrough => {
                    let rest = self.unchecked.split();
                    self.checked.extend_from_slice(&rest);
                }
                Reading::Refused | Reading::Cut => {
                    self.unchecked.clear();
                    return;
                }
            }
        }
    }

    /// Checks the head at the start of `unchecked` (or sees HTTP/2's preface there); `false`
    /// when nothing more can be checked until more bytes come, or ever (a refused head).
    fn check_head(&mut self) -> bool {
        if self.first && self.opens_http2() {
            if self.unchecked.len() < HTTP2_PREFACE.len() {
                return false;
            }
            self.reading = Reading::PassThrough;
            return true;
        }
        match take_head(&mut self.unchecked) {
            Ok(None) => false,
            Ok(Some(head)) => {
                self.first = false;
                self.checked.extend_from_slice(&head.raw);
                self.reading = body_of(&head);
                true
            }
            Err(bad) => {
                self.refusal = bad.answer().map(|answer| (answer, 0));
                self.reading = Reading::Refused;
                self.unchecked.clear();
                false
            }
        }
    }

    /// Whether the unchecked bytes are (the start of) HTTP/2's preface.
    fn opens_http2(&self) -> bool {
        let length = self.unchecked.len().min(HTTP2_PREFACE.len());
        HTTP2_PREFACE.starts_with(&self.unchecked[..length])
    }
}

/// How far a chunked body went in the bytes at hand.
enum Chunks {
    /// It goes on past them.
    Unfinished,
    /// It ended: a head may follow.
    Ended,
    /// They are not a chunked body.
    Broken,
}

/// Moves the chunked body's bytes from `unchecked` to `checked`, as far as it goes.
fn pass_chunks(
    decoder: &mut ChunkedDecoder,
    unchecked: &mut BytesMut,
    checked: &mut BytesMut,
) -> Chunks {
    // The decoder takes what it reads: run it on a copy to learn how far the body goes, and
    // pass the bytes on as they came.
    let mut view = unchecked.clone();
    let (ended, left) = loop {
        let before = view.len();
        match decoder.next(&mut view) {
            Ok(Decoded::Data(_)) => {}
            Ok(Decoded::NeedMore) => break (Chunks::Unfinished, view.len()),
            Ok(Decoded::End) => break (Chunks::Ended, view.len()),
            // What the failed step took is not passed on.
            Err(_) => break (Chunks::Broken, before),
        }
    };
    let read = unchecked.len() - left;
    let body = unchecked.split_to(read);
    checked.extend_from_slice(&body);
    ended
}

/// How the body after `head` is read.
fn body_of(head: &RequestHead) -> Reading {
    let request = &head.request;
    let headers = request.headers();
    if request.method() == Method::CONNECT || headers.contains_key(UPGRADE) {
        // Whether hyper switches protocols is its decision; what follows is not ours to read.
        return Reading::PassThrough;
    }
    if headers.contains_key(TRANSFER_ENCODING) {
        // `take_head` let through only one `chunked`, and no length beside it.
        return Reading::Chunked(ChunkedDecoder::default());
    }
    let length = headers
        .get(CONTENT_LENGTH)
        .and_then(|value| anteroom_h1::parse_length(value.as_bytes()))
        .unwrap_or(0);
    if length == 0 {
        Reading::Head
    } else {
        Reading::Length(length)
    }
}

impl<S: AsyncRead + Unpin> AsyncRead for Sentry<S> {
    fn poll_read(
        self: Pin<&mut Self>,
        context: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        loop {
            if !this.checked.is_empty() {
                let take = buf.remaining().min(this.checked.len());
                buf.put_slice(&this.checked[..take]);
                this.checked.advance(take);
                return Poll::Ready(Ok(()));
            }
            match this.reading {
                // The end of the connection, as far as hyper can tell; but only once it owes
                // no answer: an end read while it answers is the client giving up, and the
                // answer would be dropped.
                Reading::Refused => {
                    ready!(this.requests.poll_idle(context));
                    return Poll::Ready(Ok(()));
                }
                // Mid-body: hyper owes no answer before it has read the request.
                Reading::Cut => return Poll::Ready(Ok(())),
                Reading::PassThrough if this.unchecked.is_empty() => {
                    return Pin::new(&mut this.inner).poll_read(context, buf);
                }
                _ => {}
            }
            let mut step = [0u8; READ_STEP];
            let mut read = ReadBuf::new(&mut step);
            ready!(Pin::new(&mut this.inner).poll_read(context, &mut read))?;
            if read.filled().is_empty() {
                // The client closed: hyper sees whatever was left, then the end.
                let rest = this.unchecked.split();
                if rest.is_empty() {
                    return Poll::Ready(Ok(()));
                }
                this.checked.extend_from_slice(&rest);
                continue;
            }
            this.unchecked.extend_from_slice(read.filled());
            this.check();
        }
    }
}

impl<S: AsyncWrite + Unpin> AsyncWrite for Sentry<S> {
    fn poll_write(
        self: Pin<&mut Self>,
        context: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.get_mut().inner).poll_write(context, buf)
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        context: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.get_mut().inner).poll_write_vectored(context, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }

    fn poll_flush(self: Pin<&mut Self>, context: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().inner).poll_flush(context)
    }

    /// Writes the refusal of a refused head (after every answer hyper owed), then shuts down.
    fn poll_shutdown(self: Pin<&mut Self>, context: &mut Context<'_>) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        while let Some((answer, written)) = &mut this.refusal {
            if *written == answer.len() {
                ready!(Pin::new(&mut this.inner).poll_flush(context))?;
                this.refusal = None;
                break;
            }
            let wrote = ready!(Pin::new(&mut this.inner).poll_write(context, &answer[*written..]))?;
            if wrote == 0 {
                this.refusal = None;
                break;
            }
            *written += wrote;
        }
        Pin::new(&mut this.inner).poll_shutdown(context)
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};

    /// What hyper would read through a sentry from a client sending `wire` in pieces of
    /// `piece` bytes, and what the sentry writes when hyper shuts the connection down.
    async fn through(wire: &[u8], piece: usize) -> (Vec<u8>, Vec<u8>) {
        let (mut client, server) = tokio::io::duplex(1 << 20);
        let mut sentry = Sentry::new(server, Arc::default());
        for part in wire.chunks(piece) {
            client.write_all(part).await.unwrap();
        }
        client.shutdown().await.unwrap();
        let mut seen = Vec::new();
        sentry.read_to_end(&mut seen).await.unwrap();
        sentry.shutdown().await.unwrap();
        let mut answer = Vec::new();
        client.read_to_end(&mut answer).await.unwrap();
        (seen, answer)
    }

    #[tokio::test]
    async fn good_requests_pass_as_they_came_however_they_are_split() {
        let wire: &[u8] = b"POST /a HTTP/1.1\r\nHost: x\r\nContent-Length: 3\r\n\r\nabc\
            POST /b HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n3;x\r\nabc\r\n0\r\n\r\n\
            GET /c HTTP/1.1\r\nHost: x\r\n\r\n";
        for piece in [1, 2, 5, 64, wire.len()] {
            let (seen, answer) = through(wire, piece).await;
            assert_eq!(seen, wire, "pieces of {piece}");
            assert!(answer.is_empty());
        }
    }

    #[tokio::test]
    async fn a_refused_head_is_never_read_and_its_refusal_is_written_at_the_end() {
        let good: &[u8] = b"GET /a HTTP/1.1\r\nHost: x\r\n\r\n";
        let smuggling: &[u8] = b"POST /b HTTP/1.1\r\nHost: x\r\nContent-Length: 4\r\n\
            Transfer-Encoding: chunked\r\n\r\n0\r\n\r\nGET /smuggled HTTP/1.1\r\nHost: x\r\n\r\n";
        for piece in [1, 7, 1000] {
            let (seen, answer) = through(&[good, smuggling].concat(), piece).await;
            assert_eq!(seen, good, "pieces of {piece}");
            let answer = String::from_utf8(answer).unwrap();
            assert!(answer.starts_with("HTTP/1.1 400 "), "{answer}");
            assert!(answer.contains("invalid_framing"), "{answer}");
        }
    }

    #[tokio::test]
    async fn a_chunked_body_the_codec_cannot_read_ends_what_hyper_reads() {
        let head: &[u8] = b"POST /a HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n";
        let smuggled: &[u8] = b"POST /b HTTP/1.1\r\nHost: x\r\nContent-Length: 4\r\n\
            Transfer-Encoding: chunked\r\n\r\n0\r\n\r\n";
        // hyper reads a size padded with zeros past 15 digits; the codec does not.
        let padded = [head, b"00000000000000001\r\na\r\n0\r\n\r\n", smuggled].concat();
        for piece in [1, 9, padded.len()] {
            let (seen, answer) = through(&padded, piece).await;
            assert_eq!(seen, head, "pieces of {piece}");
            assert!(
                answer.is_empty(),
                "mid-request: hyper answers, not the sentry"
            );
        }
    }

    #[tokio::test]
    async fn http2_and_upgrades_pass_through_unread() {
        let preface = [HTTP2_PREFACE, b"\x00\x00\x00\x04\x00\x00\x00\x00\x00"].concat();
        assert_eq!(through(&preface, 3).await.0, preface);
        let upgrade: &[u8] = b"GET /ws HTTP/1.1\r\nHost: x\r\nUpgrade: websocket\r\n\
            Connection: upgrade\r\n\r\n\x81\x05hello GARBAGE \r\n\r\n";
        assert_eq!(through(upgrade, 4).await.0, upgrade);
    }
}
