//! Frontend frames are checked before pgwire decodes them.
//!
//! pgwire's message decoders trust the lengths and counts inside a message
//! body: a Bind that claims more parameters than it holds, or a Parse cut
//! short, reads past the frame and panics (`advance out of bounds`). A
//! [`FrameGuard`] sits between the socket (after TLS) and pgwire's codec and
//! walks each frame's structure as its bytes arrive: the length against the
//! limit for its kind, every string terminated inside the frame, every count
//! matched by what follows, nothing left over. Bytes pass to the codec as
//! they are checked, except that the header and the last byte of a frame
//! pass only once the frame is known to be whole and well formed, so pgwire
//! never sees a frame it could misread. A bad frame ends the read with a
//! [`ProtocolViolation`], which the connection answers with 08P01 and a
//! close, as PostgreSQL does.

use std::io;
use std::pin::Pin;
use std::task::{Context, Poll};

use bytes::{Buf, BytesMut};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};

/// What PostgreSQL allows a startup packet (`MAX_STARTUP_PACKET_LENGTH`).
const MAX_STARTUP_BYTES: u32 = 10_000;
/// Messages with small bodies (Sync, Describe, Execute, ...):
/// PostgreSQL's `PQ_SMALL_MESSAGE_LIMIT`.
const MAX_SMALL_MESSAGE_BYTES: u32 = 10_000;
/// A SASL or password message (PostgreSQL's `PG_MAX_AUTH_TOKEN_LENGTH`).
const MAX_AUTH_MESSAGE_BYTES: u32 = 65_535;
/// The largest message at all (PostgreSQL's `PQ_LARGE_MESSAGE_LIMIT`, and
/// pgwire's own limit).
pub const MAX_LARGE_MESSAGE_BYTES: u32 = 0x3fff_ffff - 1;

/// What a Query, Parse or Bind message holds beyond its statement: names,
/// counts and type oids.
const MESSAGE_OVERHEAD_BYTES: u64 = 64 << 10;

const CANCEL_REQUEST_CODE: u32 = 80_877_102;
/// A cancel key of protocol 3.2 is at most 256 bytes.
const MAX_CANCEL_KEY_BYTES: u32 = 256;

/// A frame that breaks the protocol; the connection ends with it.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{message}")]
pub struct ProtocolViolation {
    /// 08P01, or 0A000 for a protocol version Sluice does not speak.
    pub sqlstate: &'static str,
    pub message: String,
}

impl ProtocolViolation {
    fn new(message: impl Into<String>) -> Self {
        ProtocolViolation {
            sqlstate: "08P01",
            message: message.into(),
        }
    }

    /// The violation inside an I/O error the guard returned, if it is one.
    pub fn of(error: &io::Error) -> Option<&ProtocolViolation> {
        error.get_ref()?.downcast_ref::<ProtocolViolation>()
    }
}

/// One field of a message body, read in order.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Field {
    /// A NUL-terminated string.
    CStr,
    /// The rest of a string whose first bytes passed (so it is not empty).
    CStrRest,
    /// A big-endian integer of 1, 2 or 4 bytes.
    Int(u8),
    /// `n` bytes of anything.
    Skip(u64),
}

/// Which message the parser is inside, and where.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Body {
    /// Between frames.
    Idle,
    /// The startup packet's parameters: names and values until an empty name.
    StartupParams { expect_value: bool },
    /// A message that is done with its fields: only its end may follow.
    Done,
    /// Fields of a tagged message, by tag and step.
    Tagged { tag: u8, step: u8, left: u32 },
}

/// Walks frames of the frontend protocol. Feed it the unreleased bytes; it
/// says how many of them may pass to the decoder.
#[derive(Debug)]
pub struct FrameParser {
    /// Untagged startup packets until the startup message itself.
    startup: bool,
    /// Bytes of the current frame not yet passed (header excluded).
    frame_left: u32,
    body: Body,
    /// A field underway: a partly read string or blob.
    pending: Option<Field>,
    /// The largest Query, Parse or Bind message: the statement size limit,
    /// and never more than PostgreSQL's 1 GiB.
    max_large: u32,
    /// A bad frame found after good ones, reported on the next feed.
    failed: Option<ProtocolViolation>,
}

impl FrameParser {
    pub fn new(max_message_bytes: u64) -> Self {
        FrameParser {
            startup: true,
            frame_left: 0,
            body: Body::Idle,
            pending: None,
            max_large: max_message_bytes
                .saturating_add(MESSAGE_OVERHEAD_BYTES)
                .min(MAX_LARGE_MESSAGE_BYTES as u64) as u32,
            failed: None,
        }
    }

    /// How many bytes at the front of `input` are checked and may pass.
    /// Returns fewer than `input.len()` when it needs more bytes to decide;
    /// an error when the frame is malformed (bytes before it still pass).
    pub fn feed(&mut self, input: &[u8]) -> Result<usize, ProtocolViolation> {
        if let Some(e) = self.failed.take() {
            return Err(e);
        }
        let mut at = 0;
        loop {
            match self.step(&input[at..]) {
                Ok(0) => return Ok(at),
                Ok(step) => at += step,
                // The frames before the bad one pass first.
                Err(e) if at > 0 => {
                    self.failed = Some(e);
                    return Ok(at);
                }
                Err(e) => return Err(e),
            }
        }
    }

    /// One step: a header, or one field (or part of one) of a body.
    fn step(&mut self, input: &[u8]) -> Result<usize, ProtocolViolation> {
        if input.is_empty() {
            return Ok(0);
        }
        if self.body == Body::Idle {
            return self.header(input);
        }
        let field = match self.pending.take() {
            Some(f) => f,
            None => match self.next_field()? {
                Some(f) => f,
                None => {
                    return Err(ProtocolViolation::new(
                        "invalid message format: bytes past the end of the message",
                    ))
                }
            },
        };
        // How many bytes this field takes now, and whether it is complete.
        let visible = input.len().min(self.frame_left as usize);
        let (take, complete, value) = match field {
            Field::CStr | Field::CStrRest => match input[..visible].iter().position(|b| *b == 0) {
                Some(nul) => (
                    nul + 1,
                    true,
                    Some((nul == 0 && field == Field::CStr) as i64),
                ),
                None if visible == self.frame_left as usize => {
                    return Err(ProtocolViolation::new(
                        "invalid string in message: no terminating NUL",
                    ))
                }
                None => (visible, false, None),
            },
            Field::Int(n) => {
                let n = n as usize;
                if self.frame_left < n as u32 {
                    return Err(ProtocolViolation::new(
                        "invalid message format: the message ends inside a field",
                    ));
                }
                if input.len() < n {
                    self.pending = Some(field);
                    return Ok(0);
                }
                let v = match n {
                    1 => input[0] as i64,
                    2 => i16::from_be_bytes([input[0], input[1]]) as i64,
                    _ => i32::from_be_bytes([input[0], input[1], input[2], input[3]]) as i64,
                };
                (n, true, Some(v))
            }
            Field::Skip(n) => {
                if (self.frame_left as u64) < n {
                    return Err(ProtocolViolation::new("insufficient data left in message"));
                }
                let take = (n as usize).min(visible);
                (take, take as u64 == n, None)
            }
        };
        if !complete {
            // A field cut off by the input (not by the frame): pass what
            // there is, but never the frame's last byte.
            let take = take.min(self.frame_left as usize - 1);
            self.pending = Some(match field {
                Field::Skip(n) => Field::Skip(n - take as u64),
                Field::CStr | Field::CStrRest => Field::CStrRest,
                f => f,
            });
            self.frame_left -= take as u32;
            return Ok(take);
        }
        self.after_value(field, value.unwrap_or(0))?;
        let ends_frame = take as u32 == self.frame_left;
        if ends_frame {
            // The last byte passes only when nothing more is owed.
            if self.owes_more() {
                return Err(ProtocolViolation::new(
                    "invalid message format: the message ends before its fields",
                ));
            }
            self.frame_left = 0;
            self.body = Body::Idle;
            return Ok(take);
        }
        self.frame_left -= take as u32;
        Ok(take)
    }

    /// A frame header: `length code` while starting up, `tag length` after.
    /// It passes only whole and valid, with the first body step checked.
    fn header(&mut self, input: &[u8]) -> Result<usize, ProtocolViolation> {
        if self.startup {
            if input.len() < 8 {
                return Ok(0);
            }
            let len = u32::from_be_bytes([input[0], input[1], input[2], input[3]]);
            let code = u32::from_be_bytes([input[4], input[5], input[6], input[7]]);
            if !(8..=MAX_STARTUP_BYTES).contains(&len) {
                return Err(ProtocolViolation::new(format!(
                    "invalid length of startup packet: {len}"
                )));
            }
            if code == CANCEL_REQUEST_CODE {
                // 3.0 keys are 4 bytes; 3.2 keys up to 256.
                if !(12 < len && len <= 12 + MAX_CANCEL_KEY_BYTES) {
                    return Err(ProtocolViolation::new(format!(
                        "invalid length of cancel request packet: {len}"
                    )));
                }
                return self.start_frame(8, len - 8, Body::Done, Some(Field::Skip(len as u64 - 8)));
            }
            let major = code >> 16;
            let minor = code & 0xffff;
            if major != 3 || minor > 2 {
                return Err(ProtocolViolation {
                    sqlstate: "0A000",
                    message: format!(
                        "unsupported frontend protocol {major}.{minor}: server supports 3.0 to 3.2"
                    ),
                });
            }
            if len == 8 {
                return Err(ProtocolViolation::new(
                    "invalid startup packet layout: expected terminator as last byte",
                ));
            }
            self.startup = false;
            return self.start_frame(
                8,
                len - 8,
                Body::StartupParams {
                    expect_value: false,
                },
                None,
            );
        }
        if input.len() < 5 {
            return Ok(0);
        }
        let tag = input[0];
        let len = u32::from_be_bytes([input[1], input[2], input[3], input[4]]);
        let max = match tag {
            b'Q' | b'P' | b'B' if len > self.max_large && len <= MAX_LARGE_MESSAGE_BYTES => {
                return Err(ProtocolViolation {
                    sqlstate: "54000",
                    message: format!(
                        "message of {len} bytes exceeds the statement size limit of {} bytes \
                         (--max-statement-bytes)",
                        self.max_large
                    ),
                })
            }
            b'Q' | b'P' | b'B' => self.max_large,
            // COPY data is bounded by the statement it belongs to.
            b'd' => MAX_LARGE_MESSAGE_BYTES,
            b'p' => MAX_AUTH_MESSAGE_BYTES,
            b'D' | b'C' | b'E' | b'S' | b'H' | b'X' | b'c' | b'f' => MAX_SMALL_MESSAGE_BYTES,
            _ => {
                return Err(ProtocolViolation::new(format!(
                    "invalid frontend message type {tag}"
                )))
            }
        };
        if len < 4 || len > max {
            return Err(ProtocolViolation::new(format!(
                "invalid message length {len} for message type '{}'",
                tag as char
            )));
        }
        let body = match tagged_field(tag, 0, 0) {
            Some(_) => Body::Tagged {
                tag,
                step: 0,
                left: 0,
            },
            None => Body::Done,
        };
        let pending = match tag {
            // Anything: COPY data, and authentication messages that login
            // checks once it knows which kind they are.
            b'd' | b'p' => Some(Field::Skip(len as u64 - 4)),
            _ => None,
        };
        self.start_frame(5, len - 4, body, pending)
    }

    /// Enters a frame whose header (`header` bytes) is valid. An empty
    /// body must be complete already; its header passes with it.
    fn start_frame(
        &mut self,
        header: usize,
        body_len: u32,
        body: Body,
        pending: Option<Field>,
    ) -> Result<usize, ProtocolViolation> {
        self.frame_left = body_len;
        self.body = body;
        self.pending = pending.filter(|f| *f != Field::Skip(0));
        if body_len == 0 {
            if self.owes_more() {
                return Err(ProtocolViolation::new(
                    "invalid message format: the message ends before its fields",
                ));
            }
            self.body = Body::Idle;
        }
        Ok(header)
    }

    /// Whether the message still expects a field.
    fn owes_more(&self) -> bool {
        if let Some(f) = self.pending {
            return f != Field::Skip(0);
        }
        match self.body {
            Body::Idle | Body::Done => false,
            Body::StartupParams { .. } => true,
            Body::Tagged { tag, step, left } => tagged_field(tag, step, left).is_some(),
        }
    }

    fn next_field(&mut self) -> Result<Option<Field>, ProtocolViolation> {
        Ok(match self.body {
            Body::Idle | Body::Done => None,
            Body::StartupParams { .. } => Some(Field::CStr),
            Body::Tagged { tag, step, left } => tagged_field(tag, step, left),
        })
    }

    /// Moves past a complete field whose value (an integer, or for a
    /// string 1 when it was empty) is `v`.
    fn after_value(&mut self, field: Field, v: i64) -> Result<(), ProtocolViolation> {
        match (&mut self.body, field) {
            (Body::StartupParams { expect_value }, Field::CStr | Field::CStrRest) => {
                if *expect_value {
                    *expect_value = false;
                } else if v == 1 {
                    // The empty name that ends the list.
                    self.body = Body::Done;
                } else {
                    *expect_value = true;
                }
            }
            // A blob's end moves nothing: the step that announced it has
            // moved on already.
            (Body::Tagged { .. }, Field::Skip(_)) => {}
            (Body::Tagged { tag, step, left }, _) => {
                let (next_step, next_left, blob) = tagged_advance(*tag, *step, *left, v)?;
                *step = next_step;
                *left = next_left;
                self.pending = blob;
            }
            _ => {}
        }
        Ok(())
    }
}

/// Field `step` of a message with `tag`; `left` counts repeats of a list.
///
/// Query: string. Parse: name, query, int16 n, n × int32 oid. Bind: portal,
/// statement, int16 n, n × int16 format, int16 n, n × (int32 len, bytes),
/// int16 n, n × int16 format. Describe and Close: byte 'S'|'P', name.
/// Execute: portal, int32. CopyFail: string.
fn tagged_field(tag: u8, step: u8, left: u32) -> Option<Field> {
    use Field::*;
    match (tag, step) {
        (b'Q', 0) | (b'f', 0) => Some(CStr),
        (b'P', 0 | 1) => Some(CStr),
        (b'P', 2) => Some(Int(2)),
        (b'P', 3) if left > 0 => Some(Int(4)),
        (b'B', 0 | 1) => Some(CStr),
        (b'B', 2) => Some(Int(2)),
        (b'B', 3) if left > 0 => Some(Int(2)),
        (b'B', 4) => Some(Int(2)),
        (b'B', 5) if left > 0 => Some(Int(4)),
        (b'B', 6) => Some(Int(2)),
        (b'B', 7) if left > 0 => Some(Int(2)),
        (b'D' | b'C', 0) => Some(Int(1)),
        (b'D' | b'C', 1) => Some(CStr),
        (b'E', 0) => Some(CStr),
        (b'E', 1) => Some(Int(4)),
        _ => None,
    }
}

/// The step after a complete field of value `v`, the repeats left, and a
/// blob that follows it (a Bind parameter's bytes).
fn tagged_advance(
    tag: u8,
    step: u8,
    left: u32,
    v: i64,
) -> Result<(u8, u32, Option<Field>), ProtocolViolation> {
    let count = |v: i64, what: &str| {
        if v < 0 {
            Err(ProtocolViolation::new(format!("invalid {what} count {v}")))
        } else {
            Ok(v as u32)
        }
    };
    // A list step: one fewer left; when none are left, the step after.
    let list = |step: u8, left: u32| {
        if left > 1 {
            (step, left - 1, None)
        } else {
            (step + 1, 0, None)
        }
    };
    Ok(match (tag, step) {
        (b'P', 2) => {
            let n = count(v, "parameter type")?;
            if n == 0 {
                (4, 0, None)
            } else {
                (3, n, None)
            }
        }
        (b'P', 3) => list(3, left),
        (b'B', 2 | 4 | 6) => {
            let what = match step {
                2 => "parameter format",
                4 => "parameter",
                _ => "result format",
            };
            let n = count(v, what)?;
            if n == 0 {
                (step + 2, 0, None)
            } else {
                (step + 1, n, None)
            }
        }
        (b'B', 3 | 7) => list(step, left),
        // A parameter's length; its bytes follow (none for NULL, -1).
        (b'B', 5) => {
            if v < -1 {
                return Err(ProtocolViolation::new(format!(
                    "invalid parameter length {v}"
                )));
            }
            let (s, l, _) = list(5, left);
            (s, l, (v > 0).then_some(Field::Skip(v as u64)))
        }
        (b'D' | b'C', 0) => {
            if v != b'S' as i64 && v != b'P' as i64 {
                let what = if tag == b'D' { "DESCRIBE" } else { "CLOSE" };
                return Err(ProtocolViolation::new(format!(
                    "invalid {what} message subtype {v}"
                )));
            }
            (1, 0, None)
        }
        (_, s) => (s + 1, 0, None),
    })
}

/// A socket whose reads yield only checked frames (see the module header).
pub struct FrameGuard<IO> {
    io: IO,
    /// Bytes read from the socket that have not passed yet; the first
    /// `checked` of them may.
    unread: BytesMut,
    checked: usize,
    parser: FrameParser,
    /// Set once a frame failed: reads end with it after the bytes before it.
    failed: Option<ProtocolViolation>,
    eof: bool,
}

impl<IO> FrameGuard<IO> {
    /// Guards `io`; `already_read` holds bytes read from it before (the
    /// TLS negotiation reads the first packet ahead).
    pub fn new(io: IO, already_read: BytesMut, max_message_bytes: u64) -> Self {
        FrameGuard {
            io,
            unread: already_read,
            checked: 0,
            parser: FrameParser::new(max_message_bytes),
            failed: None,
            eof: false,
        }
    }
}

impl<IO: AsyncRead + Unpin> AsyncRead for FrameGuard<IO> {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        loop {
            if this.checked > 0 {
                let n = this.checked.min(buf.remaining());
                buf.put_slice(&this.unread[..n]);
                this.unread.advance(n);
                this.checked -= n;
                return Poll::Ready(Ok(()));
            }
            if let Some(v) = &this.failed {
                return Poll::Ready(Err(io::Error::new(io::ErrorKind::InvalidData, v.clone())));
            }
            if !this.unread.is_empty() {
                match this.parser.feed(&this.unread) {
                    Ok(n) if n > 0 => {
                        this.checked = n;
                        continue;
                    }
                    Ok(_) => {}
                    Err(v) => {
                        this.failed = Some(v);
                        continue;
                    }
                }
            }
            if this.eof {
                // A frame cut off by the end of the stream is dropped, as
                // the decoder would drop it.
                return Poll::Ready(Ok(()));
            }
            // Read more behind what is held.
            let mut chunk = [0u8; 8192];
            let mut more = ReadBuf::new(&mut chunk);
            match Pin::new(&mut this.io).poll_read(cx, &mut more) {
                Poll::Pending => return Poll::Pending,
                Poll::Ready(Err(e)) => return Poll::Ready(Err(e)),
                Poll::Ready(Ok(())) => {
                    let read = more.filled();
                    this.eof = read.is_empty();
                    this.unread.extend_from_slice(read);
                }
            }
        }
    }
}

impl<IO: AsyncWrite + Unpin> AsyncWrite for FrameGuard<IO> {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        data: &[u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.get_mut().io).poll_write(cx, data)
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().io).poll_flush(cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().io).poll_shutdown(cx)
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.get_mut().io).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.io.is_write_vectored()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use pgwire::messages::{DecodeContext, PgWireFrontendMessage, ProtocolVersion};

    fn cstr(s: &str) -> Vec<u8> {
        let mut v = s.as_bytes().to_vec();
        v.push(0);
        v
    }

    fn message(tag: u8, body: &[u8]) -> Vec<u8> {
        let mut m = vec![tag];
        m.extend_from_slice(&((body.len() + 4) as u32).to_be_bytes());
        m.extend_from_slice(body);
        m
    }

    fn startup() -> Vec<u8> {
        let mut body = 196608u32.to_be_bytes().to_vec();
        for s in ["user", "u", "database", "d"] {
            body.extend(cstr(s));
        }
        body.push(0);
        let mut m = ((body.len() + 4) as u32).to_be_bytes().to_vec();
        m.extend(body);
        m
    }

    fn parse() -> Vec<u8> {
        let mut b = cstr("s1");
        b.extend(cstr("SELECT $1::int, $2::text"));
        b.extend_from_slice(&2u16.to_be_bytes());
        b.extend_from_slice(&23u32.to_be_bytes());
        b.extend_from_slice(&25u32.to_be_bytes());
        message(b'P', &b)
    }

    fn bind() -> Vec<u8> {
        let mut b = cstr("");
        b.extend(cstr("s1"));
        b.extend_from_slice(&1u16.to_be_bytes());
        b.extend_from_slice(&0u16.to_be_bytes());
        b.extend_from_slice(&3u16.to_be_bytes());
        b.extend_from_slice(&1u32.to_be_bytes());
        b.push(b'5');
        b.extend_from_slice(&(-1i32).to_be_bytes());
        b.extend_from_slice(&0u32.to_be_bytes());
        b.extend_from_slice(&1u16.to_be_bytes());
        b.extend_from_slice(&1u16.to_be_bytes());
        message(b'B', &b)
    }

    /// A session's worth of well-formed frames.
    fn session() -> Vec<Vec<u8>> {
        let mut describe = vec![b'S'];
        describe.extend(cstr("s1"));
        let mut execute = cstr("");
        execute.extend_from_slice(&0u32.to_be_bytes());
        vec![
            startup(),
            message(b'p', b"secret\0"),
            message(b'Q', &cstr("SELECT 1")),
            parse(),
            bind(),
            message(b'D', &describe),
            message(b'E', &execute),
            message(b'H', &[]),
            message(b'S', &[]),
            message(b'd', b"1,2\n"),
            message(b'd', &[]),
            message(b'c', &[]),
            message(b'f', &cstr("oops")),
            message(b'C', &describe),
            message(b'X', &[]),
        ]
    }

    /// Feeds `input` in chunks of `chunk` bytes as a socket would deliver
    /// them; returns the bytes allowed through and the violation, if any.
    fn run(input: &[u8], chunk: usize) -> (Vec<u8>, Option<ProtocolViolation>) {
        let mut parser = FrameParser::new(1 << 20);
        let (mut passed, mut held) = (Vec::new(), Vec::new());
        for piece in input.chunks(chunk.max(1)) {
            held.extend_from_slice(piece);
            loop {
                match parser.feed(&held) {
                    Ok(0) => break,
                    Ok(n) => {
                        passed.extend(held.drain(..n));
                    }
                    Err(v) => return (passed, Some(v)),
                }
            }
        }
        (passed, None)
    }

    /// Decodes what passed as pgwire's server codec would; panics if the
    /// decoder does.
    fn decode_all(passed: &[u8]) -> usize {
        let mut buf = BytesMut::from(passed);
        let mut ctx = DecodeContext::new(ProtocolVersion::PROTOCOL3_0);
        ctx.awaiting_frontend_ssl = false;
        let mut decoded = 0;
        while let Ok(Some(m)) = PgWireFrontendMessage::decode(&mut buf, &ctx) {
            if matches!(m, PgWireFrontendMessage::Startup(_)) {
                ctx.awaiting_frontend_startup = false;
            }
            decoded += 1;
        }
        decoded
    }

    #[test]
    fn well_formed_frames_pass_whole_in_any_chunking() {
        let input: Vec<u8> = session().concat();
        for chunk in [1, 2, 3, 5, 7, 64, input.len()] {
            let (passed, violation) = run(&input, chunk);
            assert_eq!(violation, None, "chunk {chunk}");
            assert_eq!(passed, input, "chunk {chunk}");
        }
        assert_eq!(decode_all(&input), session().len());
    }

    #[test]
    fn malformed_frames_are_violations_with_postgres_words() {
        let ok = startup();
        let cases: Vec<(Vec<u8>, &str)> = vec![
            (message(b'S', &[0]), "bytes past the end"),
            (message(b'Q', b"SELECT 1"), "no terminating NUL"),
            (message(b'Q', &[b'a', 0, b'b', 0]), "bytes past the end"),
            (message(b'Z', &[]), "invalid frontend message type 90"),
            (vec![b'Q', 0, 0, 0, 2], "invalid message length 2"),
            (vec![b'Q', 0x7f, 0xff, 0xff, 0xff], "invalid message length"),
            (vec![b'S', 0, 0, 0x30, 0], "invalid message length"),
            (message(b'P', &[0, 0, 0, 5, 0, 0, 0, 23]), "ends"),
            (message(b'P', &[0, 0, 0, 2, 0, 0]), "ends inside a field"),
            (
                message(b'P', &[0, 0, 0xff, 0xff]),
                "invalid parameter type count -1",
            ),
            (
                message(b'D', &[b'X', 0]),
                "invalid DESCRIBE message subtype 88",
            ),
            (message(b'E', &[0, 0, 0]), "ends inside a field"),
        ];
        for (frame, words) in cases {
            let input = [ok.clone(), frame.clone()].concat();
            let (passed, violation) = run(&input, 3);
            let v = violation.unwrap_or_else(|| panic!("{frame:?} passed"));
            assert_eq!(v.sqlstate, "08P01");
            assert!(v.message.contains(words), "{frame:?}: {}", v.message);
            // The good frame before it passed; the bad one is never whole.
            assert!(passed.len() >= ok.len() && passed.len() < input.len());
            assert_eq!(decode_all(&passed), 1);
        }
        let (_, v) = run(&[startup(), vec![b'Q', 0, 0x20, 0, 0]].concat(), 64);
        assert_eq!(v.unwrap().sqlstate, "54000");
        let (_, v) = run(&[startup(), vec![b'd', 0, 0x20, 0, 0]].concat(), 64);
        assert_eq!(v, None, "COPY data is bounded by its statement");
        let (_, v) = run(&[0, 0, 0, 8, 0, 1, 0, 0], 8);
        assert_eq!(v.unwrap().sqlstate, "0A000");
        let (_, v) = run(&[0, 0, 0, 3, 0, 3, 0, 0], 8);
        assert!(v
            .unwrap()
            .message
            .contains("invalid length of startup packet"));
    }

    #[test]
    fn a_bind_cannot_claim_more_than_it_holds() {
        let mut b = cstr("");
        b.extend(cstr(""));
        b.extend_from_slice(&0u16.to_be_bytes());
        b.extend_from_slice(&1u16.to_be_bytes());
        b.extend_from_slice(&1000u32.to_be_bytes());
        b.push(b'5');
        b.extend_from_slice(&0u16.to_be_bytes());
        let input = [startup(), message(b'B', &b)].concat();
        let (passed, v) = run(&input, 1);
        assert!(v.unwrap().message.contains("insufficient data"));
        assert_eq!(decode_all(&passed), 1);
    }

    /// Random damage to a session: whatever passes, pgwire decodes
    /// without panicking.
    #[test]
    fn whatever_passes_decodes_without_panic() {
        let frames = session();
        let mut seed = 0x2545_f491_4f6c_dd1du64;
        let mut next = move || {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            seed
        };
        let mut violations = 0;
        for _ in 0..20_000 {
            let mut input: Vec<u8> = frames
                .iter()
                .take(1 + (next() % frames.len() as u64) as usize)
                .flatten()
                .copied()
                .collect();
            match next() % 4 {
                0 => {
                    for _ in 0..1 + next() % 3 {
                        let i = (next() % input.len() as u64) as usize;
                        input[i] = next() as u8;
                    }
                }
                1 => input.truncate((next() % input.len() as u64) as usize),
                2 => {
                    let at = (next() % input.len() as u64) as usize;
                    let junk: Vec<u8> = (0..next() % 16).map(|_| next() as u8).collect();
                    input.splice(at..at, junk);
                }
                _ => {
                    let i = (next() % input.len() as u64) as usize;
                    input.remove(i);
                }
            }
            let chunk = 1 + (next() % 9) as usize;
            let (passed, v) = run(&input, chunk);
            violations += v.is_some() as u32;
            let decoded = std::panic::catch_unwind(|| decode_all(&passed));
            assert!(decoded.is_ok(), "pgwire panicked on {passed:?}");
        }
        assert!(violations > 1000, "only {violations} violations found");
    }
}
