//! A connection to the origin: plain TCP, or TLS over it for an `https://` upstream (SPEC
//! §14.5). The own client's pool and the WebSocket proxy hold these; hyper's client reaches
//! an https origin through hyper-rustls with the same settings ([`UpstreamTls`]).

use std::io;
use std::mem::MaybeUninit;
use std::pin::Pin;
use std::task::{Context, Poll, Waker};

use socket2::SockRef;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::TcpStream;

use crate::tls::UpstreamTls;

/// One connection to the origin.
pub(crate) enum UpstreamStream {
    /// `http://`.
    Plain(TcpStream),
    /// `https://`: boxed, as a TLS connection's state is large and plain ones are the rule.
    Tls(Box<tokio_rustls::client::TlsStream<TcpStream>>),
}

impl UpstreamStream {
    /// Opens a connection to `address`, with the TLS handshake (the origin's certificate
    /// checked) when `tls` is given.
    pub(crate) async fn connect(
        address: &str,
        tls: Option<&UpstreamTls>,
    ) -> io::Result<UpstreamStream> {
        let tcp = TcpStream::connect(address).await?;
        let _ = tcp.set_nodelay(true);
        match tls {
            None => Ok(UpstreamStream::Plain(tcp)),
            Some(tls) => {
                let stream = tls.connector().connect(tls.server_name(), tcp).await?;
                Ok(UpstreamStream::Tls(Box::new(stream)))
            }
        }
    }

    /// Whether the origin has neither closed the connection nor sent anything on it since its
    /// last answer, checked without waiting (before an idle pooled connection is reused).
    ///
    /// The runtime's I/O driver is asked first: a connection it has not seen readable since
    /// its last read came up short (which is how an answer's last read usually ends) has
    /// neither bytes nor an end waiting, as far as the event loop knows, and is taken without
    /// a system call, as hyper's pool and nginx's upstream keep-alive take theirs. Only a
    /// connection the driver saw readable is probed with a `peek`. (A close still in flight
    /// is a race either way: a request that then fails before its answer is retried when
    /// idempotent.)
    pub(crate) fn is_quiet(&mut self) -> bool {
        match self {
            UpstreamStream::Plain(tcp) => {
                let mut context = Context::from_waker(Waker::noop());
                if tcp.poll_read_ready(&mut context).is_pending() {
                    return true;
                }
                let mut probe = [MaybeUninit::<u8>::uninit(); 1];
                matches!(
                    SockRef::from(&*tcp).peek(&mut probe),
                    Err(error) if error.kind() == io::ErrorKind::WouldBlock
                )
            }
            UpstreamStream::Tls(tls) => {
                // The socket may hold TLS records that carry no answer bytes (a TLS 1.3
                // session ticket): only a read through TLS tells. Anything it yields, or the
                // end of the connection, makes the connection unusable anyway.
                let mut probe = [0u8; 1];
                let mut buf = ReadBuf::new(&mut probe);
                let mut context = Context::from_waker(Waker::noop());
                Pin::new(tls.as_mut())
                    .poll_read(&mut context, &mut buf)
                    .is_pending()
            }
        }
    }
}

impl AsyncRead for UpstreamStream {
    fn poll_read(
        self: Pin<&mut Self>,
        context: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        match self.get_mut() {
            UpstreamStream::Plain(tcp) => Pin::new(tcp).poll_read(context, buf),
            UpstreamStream::Tls(tls) => Pin::new(tls.as_mut()).poll_read(context, buf),
        }
    }
}

impl AsyncWrite for UpstreamStream {
    fn poll_write(
        self: Pin<&mut Self>,
        context: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        match self.get_mut() {
            UpstreamStream::Plain(tcp) => Pin::new(tcp).poll_write(context, buf),
            UpstreamStream::Tls(tls) => Pin::new(tls.as_mut()).poll_write(context, buf),
        }
    }

    fn poll_flush(self: Pin<&mut Self>, context: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self.get_mut() {
            UpstreamStream::Plain(tcp) => Pin::new(tcp).poll_flush(context),
            UpstreamStream::Tls(tls) => Pin::new(tls.as_mut()).poll_flush(context),
        }
    }

    fn poll_shutdown(self: Pin<&mut Self>, context: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self.get_mut() {
            UpstreamStream::Plain(tcp) => Pin::new(tcp).poll_shutdown(context),
            UpstreamStream::Tls(tls) => Pin::new(tls.as_mut()).poll_shutdown(context),
        }
    }
}
