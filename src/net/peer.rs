//! Outbound connections to raft peers: one TCP connection to one peer, one request in flight
//! (Kafka's raft client also keeps at most one in flight per connection, docs/wire.md §1).
//!
//! `PeerConnection::connect` negotiates versions the way Kafka's `NetworkClient` does
//! (docs/wire.md §5): ApiVersions at our highest version first; an UNSUPPORTED_VERSION answer in
//! the v0 fallback format (§6) makes it retry at `min(our max, their max)` for ApiVersions (v0 when
//! the peer does not say). The peer's ranges are kept for `negotiate`. When the caller knows
//! which cluster and node it dials (a `Target`), ApiVersions v5 names them (KIP-1242), as Kafka's
//! `NetworkClient` does for a node with a known id once it knows the cluster id.
//!
//! Everything runs on the calling glommio executor: no blocking call, no helper thread. Timeouts
//! are glommio timers. A timeout, an I/O error or an undecodable answer leaves the connection in
//! an unknown state, so it is marked broken and every later request fails at once; the caller
//! drops it and connects again. The same holds when a `request` future is dropped before it
//! completes (its answer might still arrive and would be read as the next one's).

use std::future::Future;
use std::io;
use std::net::SocketAddr;
use std::time::{Duration, Instant};

use bytes::Bytes;
use futures_lite::{future, AsyncWriteExt};
use glommio::net::{Preallocated, TcpStream};

use super::frame::{read_frame, FrameBuffer, FrameError, RequestMemory};
use super::tls::{Stream, Tls};
use crate::constants::SOCKET_REQUEST_MAX_BYTES_DEFAULT;
use crate::protocol::api_versions::{ApiVersionsRequest, ApiVersionsResponse};
use crate::protocol::header::{decode_response_header, RequestHeader};
use crate::protocol::request::encode_request_frame;
use crate::protocol::{apis, AnswerError, ApiKey, ApiSpec, ErrorCode, Reader, Writer};

/// The cluster and node a connection means to reach, sent in ApiVersions v5 (KIP-1242). A
/// Kafka broker that is another node answers REBOOTSTRAP_REQUIRED (a `Rejected` error); a
/// Kafka 4.4 controller, and ringraft, answer as usual.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Target {
    pub cluster_id: String,
    /// Not negative: Kafka's client names only nodes with a known id (not bootstrap servers).
    pub node_id: i32,
}

/// The largest response frame accepted from a peer (size prefix excluded). Larger announced
/// sizes are refused before anything is allocated. Same bound as `socket.request.max.bytes`.
pub const PEER_RESPONSE_MAX_BYTES: usize = SOCKET_REQUEST_MAX_BYTES_DEFAULT as usize;

/// Longer timeouts are cut to this (a deadline past `Instant`'s range would panic).
const TIMEOUT_MAX: Duration = Duration::from_secs(365 * 24 * 3600);

/// `ClientSoftwareName` sent in ApiVersions v3+ (KIP-511).
pub const CLIENT_SOFTWARE_NAME: &str = "ringraft";
/// `ClientSoftwareVersion` sent in ApiVersions v3+.
pub const CLIENT_SOFTWARE_VERSION: &str = env!("CARGO_PKG_VERSION");

/// Why a connection or a request failed. Every message names the peer's address. After any
/// error except `UnsupportedVersion` from `request` the connection is unusable.
#[derive(Debug, thiserror::Error)]
pub enum PeerError {
    /// The TCP connection could not be established (refused, unreachable, timed out).
    #[error("cannot connect to peer {peer}: {source}")]
    Connect {
        peer: SocketAddr,
        #[source]
        source: io::Error,
    },
    /// Reading or writing failed on an established connection.
    #[error("I/O error on the connection to peer {peer}: {source}")]
    Io {
        peer: SocketAddr,
        #[source]
        source: io::Error,
    },
    /// No complete answer within the time given.
    #[error("peer {peer} did not answer within {} ms", .after.as_millis())]
    Timeout { peer: SocketAddr, after: Duration },
    /// The peer closed the connection, or an earlier failure (or an abandoned request) left it
    /// unusable.
    #[error("connection to peer {peer} is closed: {reason}")]
    Closed {
        peer: SocketAddr,
        reason: &'static str,
    },
    /// The answer does not parse (bad frame size, bad header, bad ApiVersions body).
    #[error("cannot decode the answer of peer {peer}: {what}")]
    Decode { peer: SocketAddr, what: AnswerError },
    /// No version of `key` that both sides speak: `ours` is our range (or the single version a
    /// request asked for), `theirs` the peer's range, `None` when the peer does not serve it.
    #[error(
        "peer {peer} does not serve {} (key {}) at a version we speak: ours {ours:?}, theirs {theirs:?}",
        .key.name(), .key.0
    )]
    UnsupportedVersion {
        peer: SocketAddr,
        key: ApiKey,
        ours: (i16, i16),
        theirs: Option<(i16, i16)>,
    },
    /// The answer carries another request's correlation id.
    #[error("peer {peer} answered correlation id {got}, expected {expected}")]
    CorrelationMismatch {
        peer: SocketAddr,
        expected: i32,
        got: i32,
    },
    /// The connection handshake (ApiVersions) was answered with an error code.
    #[error("peer {peer} refused {} with {} ({})", .key.name(), .error.name(), .error.0)]
    Rejected {
        peer: SocketAddr,
        key: ApiKey,
        error: ErrorCode,
    },
}

/// How much one read from a peer takes at most. glommio's default (8 KiB) makes an 8 MiB
/// Fetch answer a thousand reads through the ring; 64 KiB makes it 128. Group 0's
/// connections use it; groups' use `constants::GROUP_PEER_READ_BUFFER_BYTES`.
pub const READ_BUFFER_BYTES: usize = 64 * 1024;

/// One TCP connection to one peer, with the peer's ApiVersions answer.
pub struct PeerConnection {
    peer: SocketAddr,
    stream: Stream,
    client_id: String,
    next_correlation_id: i32,
    /// Set while a request is on the wire and left set when it fails or is abandoned.
    broken: bool,
    /// The peer's answer to our ApiVersions request, and the version it was read at.
    api_versions: ApiVersionsResponse,
    api_versions_version: i16,
    /// The answer being read (by `read_answer` or a round trip): it belongs to this
    /// connection, so that a frame half read when the connection failed never runs on into
    /// the next connection's bytes, and an answer's memory is reused by the next once its
    /// reader has dropped it (`FrameBuffer::lend`).
    answer: FrameBuffer,
}

impl std::fmt::Debug for PeerConnection {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PeerConnection")
            .field("peer", &self.peer)
            .field("client_id", &self.client_id)
            .field("next_correlation_id", &self.next_correlation_id)
            .field("broken", &self.broken)
            .field("api_versions_version", &self.api_versions_version)
            .finish_non_exhaustive()
    }
}

impl PeerConnection {
    /// Connects to `addr` and runs the ApiVersions handshake. `connect_timeout` bounds the
    /// whole of it: TCP connect (a `Connect` error when it runs out there) plus every
    /// ApiVersions exchange (a `Timeout` error). `client_id` goes in every request header
    /// (Kafka's raft client uses `raft-client-<node.id>`); it must be shorter than 32 KiB.
    pub async fn connect(
        addr: SocketAddr,
        client_id: &str,
        connect_timeout: Duration,
    ) -> Result<PeerConnection, PeerError> {
        Self::connect_with(addr, client_id, connect_timeout, None, None).await
    }

    /// `connect`, then over TLS when `tls` is given: the handshake with `host` (the name or
    /// address dialled, which the peer's certificate must name unless host name verification
    /// is off) comes before ApiVersions and within the same `connect_timeout`. A failed
    /// handshake is a `Connect` error. `target`, when given, goes in ApiVersions v5.
    pub async fn connect_with(
        addr: SocketAddr,
        client_id: &str,
        connect_timeout: Duration,
        tls: Option<(&Tls, &str)>,
        target: Option<&Target>,
    ) -> Result<PeerConnection, PeerError> {
        let buffer = READ_BUFFER_BYTES;
        Self::connect_buffered(addr, client_id, connect_timeout, (tls, target), buffer).await
    }

    /// `connect_with`, reading through a buffer of `read_buffer_bytes` (allocated whole now).
    pub async fn connect_buffered(
        addr: SocketAddr,
        client_id: &str,
        connect_timeout: Duration,
        (tls, target): (Option<(&Tls, &str)>, Option<&Target>),
        read_buffer_bytes: usize,
    ) -> Result<PeerConnection, PeerError> {
        assert!(
            target.is_none_or(|t| t.node_id >= 0),
            "a target names a node id"
        );
        let connect_timeout = connect_timeout.min(TIMEOUT_MAX);
        let deadline = Instant::now() + connect_timeout;
        let connect_error = |source: io::Error| PeerError::Connect { peer: addr, source };
        if connect_timeout.is_zero() {
            return Err(connect_error(io::Error::new(
                io::ErrorKind::TimedOut,
                "zero connect timeout",
            )));
        }
        let stream = TcpStream::connect_timeout(addr, connect_timeout)
            .await
            .map_err(|e| connect_error(e.into()))?;
        // Requests are small and answered one at a time: do not let Nagle hold them back.
        stream
            .set_nodelay(true)
            .map_err(|e| connect_error(e.into()))?;
        let stream = stream.buffered_with(Preallocated::new(read_buffer_bytes.max(1)));
        let stream = match tls {
            None => Stream::Plain(stream),
            Some((tls, host)) => {
                let left = deadline.saturating_duration_since(Instant::now());
                tls.connect(host, stream, left)
                    .await
                    .map_err(connect_error)?
            }
        };
        let mut conn = PeerConnection {
            peer: addr,
            stream,
            client_id: client_id.to_owned(),
            next_correlation_id: 0,
            broken: false,
            api_versions: ApiVersionsResponse::default(),
            api_versions_version: 0,
            answer: FrameBuffer::new(RequestMemory::unbounded()),
        };
        conn.handshake(deadline, target).await?;
        Ok(conn)
    }

    /// ApiVersions at our highest version; on UNSUPPORTED_VERSION retry once per lower version
    /// the peer names (docs/wire.md §5 steps 1–2). `target` is on the wire from v5 only.
    async fn handshake(
        &mut self,
        deadline: Instant,
        target: Option<&Target>,
    ) -> Result<(), PeerError> {
        let ours = apis::api_versions_spec();
        let request = ApiVersionsRequest {
            client_software_name: CLIENT_SOFTWARE_NAME.to_owned(),
            client_software_version: CLIENT_SOFTWARE_VERSION.to_owned(),
            cluster_id: target.map(|t| t.cluster_id.clone()),
            node_id: target.map_or(-1, |t| t.node_id),
        };
        let mut version = ours.max_version;
        loop {
            let mut body = Writer::new();
            request.encode(&mut body, version);
            let remaining = deadline.saturating_duration_since(Instant::now());
            let answer = self
                .exchange(
                    ApiKey::API_VERSIONS,
                    version,
                    ours.flexible_from,
                    &body.into_vec(),
                    remaining,
                )
                .await?;
            let response = decode_api_versions(&answer, version).map_err(|what| {
                self.broken = true;
                PeerError::Decode {
                    peer: self.peer,
                    what,
                }
            })?;
            match response.error_code {
                ErrorCode::NONE => {
                    self.api_versions = response;
                    self.api_versions_version = version;
                    return Ok(());
                }
                ErrorCode::UNSUPPORTED_VERSION => {
                    let theirs = response
                        .api_keys
                        .iter()
                        .find(|r| r.api_key == ApiKey::API_VERSIONS.0)
                        .map(|r| (r.min_version, r.max_version));
                    // Kafka's NetworkClient: retry at the peer's max, or v0 when it names none.
                    let next = theirs.map_or(0, |(_, max)| max.min(ours.max_version));
                    let overlaps = theirs.is_none_or(|(min, _)| next >= min);
                    if next >= version || next < ours.min_version || !overlaps {
                        return Err(PeerError::UnsupportedVersion {
                            peer: self.peer,
                            key: ApiKey::API_VERSIONS,
                            ours: (ours.min_version, ours.max_version),
                            theirs,
                        });
                    }
                    version = next;
                }
                error => {
                    return Err(PeerError::Rejected {
                        peer: self.peer,
                        key: ApiKey::API_VERSIONS,
                        error,
                    })
                }
            }
        }
    }

    /// The peer's address.
    pub fn peer_addr(&self) -> SocketAddr {
        self.peer
    }

    /// The peer's advertised `[min, max]` for `key`, `None` if it does not serve it.
    pub fn peer_range(&self, key: ApiKey) -> Option<(i16, i16)> {
        self.api_versions
            .api_keys
            .iter()
            .find(|r| r.api_key == key.0)
            .map(|r| (r.min_version, r.max_version))
    }

    /// The version to send `key` at given our `[min, max]`: `min(our max, their max)`, or `None`
    /// when the peer does not serve `key` or the ranges do not overlap (docs/wire.md §5 step 3).
    pub fn negotiate(&self, key: ApiKey, ours: (i16, i16)) -> Option<i16> {
        let (their_min, their_max) = self.peer_range(key)?;
        let version = ours.1.min(their_max);
        (version >= ours.0.max(their_min)).then_some(version)
    }

    /// The peer's whole ApiVersions answer (features included).
    pub fn api_versions(&self) -> &ApiVersionsResponse {
        &self.api_versions
    }

    /// The ApiVersions version the handshake succeeded at.
    pub fn api_versions_version(&self) -> i16 {
        self.api_versions_version
    }

    /// False once a request failed or was abandoned: the caller should drop the connection.
    pub fn is_usable(&self) -> bool {
        !self.broken
    }

    /// Sends `body` as a `key` request at `version` (request header v2 when
    /// `version >= flexible_from`, else v1) and returns the response body: the response frame
    /// without its header (v1 when flexible, else v0; always v0 for ApiVersions), sharing the
    /// frame's memory. A version outside the peer's advertised range fails locally with
    /// `UnsupportedVersion` (as Kafka's client does) and leaves the connection usable; any other
    /// error leaves it broken.
    pub async fn request(
        &mut self,
        key: ApiKey,
        version: i16,
        flexible_from: i16,
        body: &[u8],
        timeout: Duration,
    ) -> Result<Bytes, PeerError> {
        let theirs = self.peer_range(key);
        if !theirs.is_some_and(|(min, max)| (min..=max).contains(&version)) {
            return Err(PeerError::UnsupportedVersion {
                peer: self.peer,
                key,
                ours: (version, version),
                theirs,
            });
        }
        self.exchange(key, version, flexible_from, body, timeout)
            .await
    }

    /// `request` for an API the peer serves without advertising it (ringraft's Produce,
    /// docs/wire.md §8.10): no version check against ApiVersions. A peer that does not serve
    /// it closes the connection, as Kafka does with an unknown key.
    pub async fn request_unadvertised(
        &mut self,
        key: ApiKey,
        version: i16,
        flexible_from: i16,
        body: &[u8],
        timeout: Duration,
    ) -> Result<Bytes, PeerError> {
        self.exchange(key, version, flexible_from, body, timeout)
            .await
    }

    /// Sends a `key` request at `version` without waiting for its answer (a Fetch session
    /// keeps several on the wire; answers come in order, `read_answer`). Returns its
    /// correlation id. A failed write leaves the connection broken.
    pub async fn send_only(
        &mut self,
        key: ApiKey,
        version: i16,
        flexible_from: i16,
        body: &[u8],
    ) -> Result<i32, PeerError> {
        let peer = self.peer;
        self.usable()?;
        let (correlation_id, frame) = self.request_frame(key, version, flexible_from, body);
        self.broken = true;
        write_all(&mut self.stream, &frame)
            .await
            .map_err(|source| PeerError::Io { peer, source })?;
        self.broken = false;
        Ok(correlation_id)
    }

    /// Reads the next answer frame whole and returns it (its header not stripped).
    /// Cancel-safe: dropped while reading, the next call carries on with the same frame
    /// (`read_frame`). A failure leaves the connection broken.
    pub async fn read_answer(&mut self) -> Result<Bytes, PeerError> {
        let peer = self.peer;
        let frame = &mut self.answer;
        match read_frame(&mut self.stream, PEER_RESPONSE_MAX_BYTES, frame).await {
            Ok(true) => Ok(frame.lend()),
            result => {
                self.broken = true;
                Err(frame_failure(peer, result))
            }
        }
    }

    /// Refuses a connection an earlier failure or abandoned request left at an unknown
    /// position in its stream.
    fn usable(&self) -> Result<(), PeerError> {
        if self.broken {
            return Err(PeerError::Closed {
                peer: self.peer,
                reason: "an earlier request failed or was abandoned",
            });
        }
        Ok(())
    }

    /// A request frame for `body` and its correlation id (the next one).
    fn request_frame(
        &mut self,
        key: ApiKey,
        version: i16,
        flexible_from: i16,
        body: &[u8],
    ) -> (i32, Vec<u8>) {
        let correlation_id = self.next_correlation_id;
        // Kafka's clients let the id wrap; keep it non-negative for readability in dumps.
        self.next_correlation_id = correlation_id.wrapping_add(1) & i32::MAX;
        let spec = ApiSpec {
            key,
            min_version: version,
            max_version: version,
            flexible_from,
        };
        let header = RequestHeader {
            api_key: key.0,
            api_version: version,
            correlation_id,
            client_id: Some(self.client_id.clone()),
        };
        (
            correlation_id,
            encode_request_frame(&header, &spec, |w| w.bytes(body)),
        )
    }

    /// One request/response round trip within `timeout`, without the version check.
    async fn exchange(
        &mut self,
        key: ApiKey,
        version: i16,
        flexible_from: i16,
        body: &[u8],
        timeout: Duration,
    ) -> Result<Bytes, PeerError> {
        let peer = self.peer;
        self.usable()?;
        // Cleared only when the answer was read whole: an error, a timeout or a dropped
        // future all leave the stream at an unknown position.
        self.broken = true;
        let (correlation_id, frame) = self.request_frame(key, version, flexible_from, body);
        let spec = ApiSpec {
            key,
            min_version: version,
            max_version: version,
            flexible_from,
        };
        let stream = &mut self.stream;
        // The connection's own answer buffer (no shared budget: answers to our own requests
        // are bounded above), so that one answer after another reuses its memory.
        let buf = &mut self.answer;
        let round_trip = async move {
            write_all(stream, &frame)
                .await
                .map_err(|source| PeerError::Io { peer, source })?;
            match read_frame(stream, PEER_RESPONSE_MAX_BYTES, buf).await {
                Ok(true) => Ok(buf.lend()),
                result => Err(frame_failure(peer, result)),
            }
        };
        let frame = with_timeout(timeout, round_trip)
            .await
            .unwrap_or(Err(PeerError::Timeout {
                peer,
                after: timeout,
            }))?;
        let (got, body) = strip_response_header(&frame, spec.response_header_version(version))
            .map_err(|what| PeerError::Decode { peer, what })?;
        if got != correlation_id {
            return Err(PeerError::CorrelationMismatch {
                peer,
                expected: correlation_id,
                got,
            });
        }
        self.broken = false;
        Ok(body)
    }
}

/// Why reading an answer frame gave no frame.
fn frame_failure(peer: SocketAddr, result: Result<bool, FrameError>) -> PeerError {
    match result {
        Ok(_) => PeerError::Closed {
            peer,
            reason: "closed by the peer",
        },
        Err(FrameError::Truncated { .. }) => PeerError::Closed {
            peer,
            reason: "closed by the peer inside a response frame",
        },
        Err(FrameError::BadSize { size, max }) => PeerError::Decode {
            peer,
            what: match size.to_be_bytes() {
                // A TLS record header (alert or handshake, version 3.x) read as a size.
                [0x15 | 0x16, 0x03, ..] => AnswerError::Tls,
                [b'H', b'T', b'T', b'P'] => AnswerError::Http,
                _ => AnswerError::FrameSize { size, max },
            },
        },
        Err(FrameError::Io(source)) => PeerError::Io { peer, source },
    }
}

async fn write_all(stream: &mut Stream, bytes: &[u8]) -> io::Result<()> {
    stream.write_all(bytes).await?;
    stream.flush().await
}

/// `fut`'s output, or `None` once `limit` has passed (a glommio timer: never blocks the shard).
async fn with_timeout<T>(limit: Duration, fut: impl Future<Output = T>) -> Option<T> {
    future::or(async { Some(fut.await) }, async {
        glommio::timer::sleep(limit.min(TIMEOUT_MAX)).await;
        None
    })
    .await
}

/// Splits a response frame (size prefix excluded) into its correlation id and body. The body is
/// a view of `frame`, not a copy.
pub fn strip_response_header(
    frame: &Bytes,
    header_version: i16,
) -> Result<(i32, Bytes), AnswerError> {
    let mut r = Reader::new(frame);
    let correlation_id =
        decode_response_header(&mut r, header_version).map_err(AnswerError::Header)?;
    Ok((correlation_id, frame.slice(r.position()..)))
}

/// Reads an ApiVersions answer to a request sent at `version`. A peer that does not serve that
/// version answers in the v0 format (docs/wire.md §6), so a body that does not parse at
/// `version` is read again at v0, as Kafka's `ApiVersionsResponse.parse` does.
fn decode_api_versions(body: &[u8], version: i16) -> Result<ApiVersionsResponse, AnswerError> {
    let failed = |source| AnswerError::Body {
        key: ApiKey::API_VERSIONS,
        version,
        source,
    };
    match ApiVersionsResponse::decode(&mut Reader::new(body), version) {
        Ok(response) => Ok(response),
        Err(first) if version != 0 => {
            ApiVersionsResponse::decode(&mut Reader::new(body), 0).map_err(|_| failed(first))
        }
        Err(first) => Err(failed(first)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::protocol::api_versions::unsupported_version_answer;

    #[test]
    fn v0_fallback_is_read_whatever_version_was_sent() {
        let mut w = Writer::new();
        unsupported_version_answer().encode(&mut w, 0);
        let body = w.into_vec();
        for version in 0..=5 {
            let response = decode_api_versions(&body, version).unwrap();
            assert_eq!(response.error_code, ErrorCode::UNSUPPORTED_VERSION);
            assert_eq!(response.api_keys.len(), 1);
            assert_eq!(response.api_keys[0].max_version, 5);
        }
        assert!(decode_api_versions(&[0, 0, 0x7f, 0xff, 0xff, 0xff], 4).is_err());
    }

    #[test]
    fn header_is_stripped_without_copying() {
        let frame = Bytes::from(vec![0, 0, 0, 9, 0, 0xaa, 0xbb]);
        let (id, body) = strip_response_header(&frame, 1).unwrap();
        assert_eq!(id, 9);
        assert_eq!(&body[..], &[0xaa, 0xbb]);
        assert_eq!(body.as_ptr(), frame[5..].as_ptr());
        let (_, body) = strip_response_header(&frame, 0).unwrap();
        assert_eq!(&body[..], &[0, 0xaa, 0xbb]);
        assert!(strip_response_header(&Bytes::from_static(&[0, 0]), 0).is_err());
        assert!(strip_response_header(&Bytes::from_static(&[0, 0, 0, 1]), 1).is_err());
    }
}
